// Unity ScriptedImporter for bakery's weights.bin (see docs/FORMAT.md, section 3).
//
// UNTESTED IN UNITY HERE: written against docs/FORMAT.md and Unity's documented
// ScriptedImporter API, never compiled or run in the Unity editor on bakery's machines.
//
// This file goes in an Editor folder; the asset type it creates, BakeryNetwork, is in
// Runtime/BakeryNetwork.cs (a ScriptableObject needs its own runtime script file). Select
// a bundle's weights.bin and choose this importer (it claims ".bin" as an override
// extension, so nothing else changes). It checks the header and the sha256 listed in the
// sibling manifest.json, then stores a BakeryNetwork asset whose Bytes go to a
// ComputeBuffer (stride 4) for decoder.hlsl, whose functions are named
// <shader_prefix>_decode (the prefix is in the manifest, per bundle).
using System;
using System.IO;
using System.Security.Cryptography;
using System.Text.RegularExpressions;
using UnityEditor.AssetImporters;
using UnityEngine;

[ScriptedImporter(1, null, new[] { "bin" })]
public class BakeryWeightsImporter : ScriptedImporter
{
    public override void OnImportAsset(AssetImportContext ctx)
    {
        byte[] data = File.ReadAllBytes(ctx.assetPath);
        CheckManifest(ctx.assetPath, data);
        if (data.Length < 16 || data[0] != 'B' || data[1] != 'K' || data[2] != 'N' || data[3] != 'N')
            throw new Exception($"{ctx.assetPath}: not a bakery weights.bin (wrong magic)");
        int version = BitConverter.ToUInt16(data, 4), dtype = BitConverter.ToUInt16(data, 6);
        int layers = (int)BitConverter.ToUInt32(data, 8), size = (int)BitConverter.ToUInt32(data, 12);
        if (version != 1 || (dtype != 1 && dtype != 2) || size != data.Length || 16 + 32 * layers > data.Length)
            throw new Exception($"{ctx.assetPath}: unsupported or truncated weights.bin");
        var net = ScriptableObject.CreateInstance<BakeryNetwork>();
        net.Dtype = dtype == 1 ? "float16" : "float32";
        net.LayerIn = new int[layers]; net.LayerOut = new int[layers]; net.Activation = new int[layers];
        net.WeightOffset = new int[layers]; net.BiasOffset = new int[layers];
        for (int i = 0; i < layers; i++)
        {
            int r = 16 + 32 * i;
            net.LayerIn[i] = (int)BitConverter.ToUInt32(data, r);
            net.LayerOut[i] = (int)BitConverter.ToUInt32(data, r + 4);
            net.Activation[i] = (int)BitConverter.ToUInt32(data, r + 8);
            net.WeightOffset[i] = (int)BitConverter.ToUInt32(data, r + 16);
            net.BiasOffset[i] = (int)BitConverter.ToUInt32(data, r + 24);
            if (net.WeightOffset[i] % 64 != 0 || net.BiasOffset[i] % 16 != 0)
                throw new Exception($"{ctx.assetPath}: layer {i} is misaligned");
        }
        net.Bytes = data;
        net.ShaderPrefix = ShaderPrefix(ctx.assetPath);
        ctx.AddObjectToAsset("network", net);
        ctx.SetMainObject(net);
    }

    // The decoder's symbol prefix from manifest.json (e.g. "bk_neural_texture_textures_rust").
    static string ShaderPrefix(string path)
    {
        string json = File.ReadAllText(Path.Combine(Path.GetDirectoryName(path), "manifest.json"));
        var m = Regex.Match(json, "\"shader_prefix\": \"([A-Za-z0-9_]+)\"");
        return m.Success ? m.Groups[1].Value : "bakery";
    }

    // Finds this file's entry in manifest.json and compares size and sha256 (a small regex
    // instead of a JSON library: the manifest is machine-written with a fixed layout).
    static void CheckManifest(string path, byte[] data)
    {
        string manifestPath = Path.Combine(Path.GetDirectoryName(path), "manifest.json");
        string json = File.ReadAllText(manifestPath);
        string name = Regex.Escape(Path.GetFileName(path));
        var m = Regex.Match(json, "\"bytes\": (\\d+),\\s*\"name\": \"" + name + "\",\\s*\"role\": \"[^\"]*\",\\s*\"sha256\": \"([0-9a-f]{64})\"");
        if (!m.Success) throw new Exception($"{path}: not listed in {manifestPath}");
        using var sha = SHA256.Create();
        string digest = BitConverter.ToString(sha.ComputeHash(data)).Replace("-", "").ToLowerInvariant();
        if (long.Parse(m.Groups[1].Value) != data.Length || digest != m.Groups[2].Value)
            throw new Exception($"{path}: size or checksum differs from manifest.json");
    }
}
