//! `exactness --checkpoint DIR`: a user's MLX-format model folder (config.json + safetensors, as
//! mlx-lm writes them) through the decoder probe, as a fail-closed gate. The folder's config is
//! read here and handed to the probe as options; the probe loads the tensors.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::Value;

/// The model types whose layers the probe's decoder computes (RMSNorm, RoPE, GQA attention,
/// SwiGLU; Qwen2's q/k/v biases): others are refused rather than probed wrongly.
const MODEL_TYPES: [&str; 3] = ["llama", "qwen2", "mistral"];

fn bad(file: &Path, what: impl Into<String>) -> anyhow::Error {
    overlay::Error::input(file, None, what)
        .with_help("the probe reads MLX-format folders as mlx-lm writes them (config.json with vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size; safetensors)")
        .into()
}

/// The probe options for the checkpoint in `dir` (dims, rope, norm, quantization, files).
pub fn spec(dir: &Path) -> Result<String> {
    let file = dir.join("config.json");
    let text =
        std::fs::read_to_string(&file).map_err(|e| bad(&file, format!("cannot read it ({e})")))?;
    let cfg: Value = serde_json::from_str(&text).map_err(|e| {
        anyhow::Error::from(overlay::Error::input(
            &file,
            Some(e.line()),
            format!("not JSON ({e})"),
        ))
    })?;
    let model_type = cfg["model_type"].as_str().unwrap_or("");
    if !MODEL_TYPES.contains(&model_type) {
        return Err(bad(
            &file,
            format!(
                "model_type {model_type:?} is not one the probe's decoder computes ({})",
                MODEL_TYPES.join(", ")
            ),
        ));
    }
    let int = |key: &str| -> Result<i64> {
        cfg[key]
            .as_i64()
            .filter(|n| *n > 0)
            .ok_or_else(|| bad(&file, format!("{key}: a positive integer is required")))
    };
    let heads = int("num_attention_heads")?;
    let hidden = int("hidden_size")?;
    let kv = cfg["num_key_value_heads"].as_i64().unwrap_or(heads);
    let head_dim = cfg["head_dim"].as_i64().unwrap_or(hidden / heads);
    let mut s = format!(
        "vocab={};d_model={hidden};layers={};q_heads={heads};kv_heads={kv};head_dim={head_dim};mlp={};rope_base={};eps={}",
        int("vocab_size")?,
        int("num_hidden_layers")?,
        int("intermediate_size")?,
        cfg["rope_theta"].as_f64().unwrap_or(10000.0),
        cfg["rms_norm_eps"].as_f64().unwrap_or(1e-6),
    );
    let q = &cfg["quantization"];
    if !q.is_null() {
        let (Some(bits), Some(gs)) = (q["bits"].as_i64(), q["group_size"].as_i64()) else {
            return Err(bad(&file, "quantization: bits and group_size are required"));
        };
        s.push_str(&format!(";bits={bits};group_size={gs}"));
    }
    let files = weight_files(dir)?;
    let names: Vec<&str> = files.iter().map(|f| f.to_str().unwrap_or("")).collect();
    if names.iter().any(|n| n.is_empty() || n.contains([';', '|'])) {
        return Err(bad(
            dir,
            "a safetensors path holds ';' or '|' (or is not UTF-8), which the probe's options cannot carry",
        ));
    }
    s.push_str(&format!(";checkpoint={}", names.join("|")));
    Ok(s)
}

/// The shards model.safetensors.index.json names, else every *.safetensors in the folder.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    let mut files: Vec<PathBuf> = if index.is_file() {
        let text = std::fs::read_to_string(&index)?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| bad(&index, format!("not JSON ({e})")))?;
        let map = v["weight_map"]
            .as_object()
            .ok_or_else(|| bad(&index, "no weight_map"))?;
        map.values()
            .filter_map(Value::as_str)
            .map(|f| dir.join(f))
            .collect()
    } else {
        std::fs::read_dir(dir)
            .map_err(|e| bad(dir, format!("cannot list it ({e})")))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect()
    };
    files.sort();
    files.dedup();
    if files.is_empty() {
        return Err(bad(dir, "holds no .safetensors file"));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(config: &str, files: &[&str]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("config.json"), config).unwrap();
        for f in files {
            std::fs::write(d.path().join(f), b"").unwrap();
        }
        d
    }

    #[test]
    fn a_quantized_qwen2_config_becomes_the_probe_options() {
        let d = folder(
            r#"{"model_type": "qwen2", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                "quantization": {"group_size": 64, "bits": 4}}"#,
            &["b.safetensors", "a.safetensors", "notes.txt"],
        );
        let s = spec(d.path()).unwrap();
        let dir = d.path().display();
        assert_eq!(
            s,
            format!(
                "vocab=100;d_model=64;layers=2;q_heads=4;kv_heads=2;head_dim=16;mlp=128;rope_base=1000000;eps=0.000001;bits=4;group_size=64;checkpoint={dir}/a.safetensors|{dir}/b.safetensors"
            )
        );
    }

    #[test]
    fn what_the_probe_cannot_compute_is_refused_naming_the_file() {
        let d = folder(
            r#"{"model_type": "gemma3", "vocab_size": 1}"#,
            &["m.safetensors"],
        );
        let e = format!("{:#}", spec(d.path()).unwrap_err());
        assert!(e.contains("config.json") && e.contains("gemma3"), "{e}");
        let d = folder(
            r#"{"model_type": "llama", "vocab_size": 1}"#,
            &["m.safetensors"],
        );
        let e = format!("{:#}", spec(d.path()).unwrap_err());
        assert!(
            e.contains("hidden_size") || e.contains("num_attention_heads"),
            "{e}"
        );
        let d = folder("{\n  \"model_type\": \n}", &[]);
        let e = format!("{:#}", spec(d.path()).unwrap_err());
        assert!(e.contains("config.json:3"), "{e}");
    }
}
