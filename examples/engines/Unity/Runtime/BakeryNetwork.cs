// Runtime asset for one bakery network (see docs/FORMAT.md, section 3).
//
// UNTESTED IN UNITY HERE: written against docs/FORMAT.md and Unity's documented
// ScriptableObject API, never compiled or run in the Unity editor on bakery's machines.
//
// This file must live OUTSIDE any Editor folder and in a file named after the class:
// Unity serialises a ScriptableObject by its script, so a class declared in an
// Editor-only file shows as "missing script" after a domain reload and is stripped from
// player builds. The importer (Editor/BakeryWeightsImporter.cs) creates these assets.
using UnityEngine;

public class BakeryNetwork : ScriptableObject
{
    public string Dtype;          // "float16" or "float32"
    public string ShaderPrefix;   // manifest networks.<name>.shader_prefix: <prefix>_decode in decoder.hlsl
    public int[] LayerIn, LayerOut, Activation, WeightOffset, BiasOffset;
    public byte[] Bytes;          // weights.bin unchanged: upload as uint words

    // A ComputeBuffer holding weights.bin as 32-bit words, for decoder.hlsl's
    // StructuredBuffer<uint> parameter. The caller owns (and releases) it.
    public ComputeBuffer CreateWeightsBuffer()
    {
        var buffer = new ComputeBuffer(Bytes.Length / 4, 4, ComputeBufferType.Structured);
        buffer.SetData(Bytes);
        return buffer;
    }
}
