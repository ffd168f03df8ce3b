// Unity editor menu: imports an ntc bundle's texture set, decoded on load to BCn.
//
// UNTESTED IN UNITY HERE: written against docs/FORMAT.md and Unity's documented
// AssetDatabase / TextureImporter API, never compiled or run in the Unity editor on
// bakery's machines. The command it runs is tested against real bundles.
//
// Assets > bakery > Import ntc bundle... asks for a bundle folder (out/<stage>/<asset>) and
// a destination inside Assets/, runs `bakery decompress BUNDLE -o DEST --format dds` (one
// BCn DDS per role with its full mip chain: albedo BC7 sRGB, normal BC5, single channels
// BC4), then imports them: Unity reads DDS natively and keeps the authored mips. The
// command is `bakery` on PATH unless the BAKERY environment variable names another.
// To decode on the GPU instead, ntc_decode.hlsl (per texel) and ntc_decode_mip.hlsl (a
// whole mip level into a RWTexture2DArray) take weights.bin and latents.bin as
// StructuredBuffer<uint>; their names start with the manifest's ntc.files.symbol_prefix.
using System;
using System.Diagnostics;
using System.IO;
using UnityEditor;
using UnityEngine;

public static class BakeryNtcImporter
{
    // Arguments of the decode-on-load command (after the bakery command itself).
    public static string DecompressArguments(string bundle, string destination)
    {
        return $"decompress \"{bundle}\" -o \"{destination}\" --format dds";
    }

    [MenuItem("Assets/bakery/Import ntc bundle...")]
    public static void ImportMenu()
    {
        string bundle = EditorUtility.OpenFolderPanel("ntc bundle (folder with manifest.json)", "", "");
        if (string.IsNullOrEmpty(bundle))
            return;
        string asset = new DirectoryInfo(bundle).Name;
        Import(bundle, "Assets/Baked/" + asset);
    }

    public static void Import(string bundle, string destination)
    {
        string manifest = File.ReadAllText(Path.Combine(bundle, "manifest.json"));
        if (!manifest.Contains("\"ntc\""))
            throw new Exception($"{bundle}: not an ntc bundle");
        string command = Environment.GetEnvironmentVariable("BAKERY") ?? "bakery";
        var start = new ProcessStartInfo(command, DecompressArguments(bundle, Path.GetFullPath(destination)))
        {
            UseShellExecute = false, RedirectStandardError = true, RedirectStandardOutput = true, CreateNoWindow = true,
        };
        using (var process = Process.Start(start))
        {
            string errors = process.StandardError.ReadToEnd();
            process.WaitForExit();
            if (process.ExitCode != 0)
                throw new Exception($"bakery decompress failed ({process.ExitCode}): {errors}");
        }
        AssetDatabase.Refresh();
        foreach (string path in Directory.GetFiles(destination, "*.dds"))
        {
            var importer = AssetImporter.GetAtPath(path.Replace('\\', '/')) as TextureImporter;
            if (importer == null)
                continue;
            string role = Path.GetFileNameWithoutExtension(path);
            importer.sRGBTexture = role == "albedo" || role == "emissive";   // the rest are data
            importer.mipmapEnabled = true;                                    // the file's own mips
            importer.SaveAndReimport();
        }
        UnityEngine.Debug.Log($"bakery: imported ntc bundle {bundle} into {destination}");
    }
}
