//! The dependency rules between the workspace's crates (ARCHITECTURE.md, "Dependency rules"),
//! read from `cargo metadata`: the low-level crates depend on no other crate of the workspace,
//! `route` on nothing of the driver, and nothing but tests depends on the programs and test-only
//! crates at the top.

use std::collections::BTreeMap;
use std::process::Command;

/// Each workspace crate's dependencies on other workspace crates, by name: normal and build ones,
/// and dev ones too with `dev` (tests may use the shared test support, `h5gds-tests`).
fn workspace_dependencies(dev: bool) -> BTreeMap<String, Vec<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo's JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| dev || d["kind"].as_str() != Some("dev"))
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.contains(d))
                .map(String::from)
                .collect();
            (p["name"].as_str().unwrap_or_default().to_string(), deps)
        })
        .collect()
}

#[test]
fn low_level_crates_depend_on_no_other_workspace_crate() {
    let deps = workspace_dependencies(true);
    for low in ["cufile-sys", "nvcomp-sys"] {
        assert_eq!(deps.get(low), Some(&Vec::new()), "{low}: {deps:?}");
    }
    // The runtime crate stands on the bindings alone.
    let runtime = deps.get("h5gds-runtime").expect("h5gds-runtime");
    assert!(
        runtime
            .iter()
            .all(|d| d == "cufile-sys" || d == "nvcomp-sys"),
        "h5gds-runtime: {runtime:?}"
    );
}

#[test]
fn the_gpu_codec_depends_on_the_runtime_not_on_the_driver() {
    let deps = workspace_dependencies(true);
    let codec = deps.get("h5gds-gpu-codec").expect("h5gds-gpu-codec");
    assert!(codec.contains(&"h5gds-runtime".to_string()), "{codec:?}");
    assert!(!codec.contains(&"h5gds-vfd".to_string()), "{codec:?}");
}

#[test]
fn route_depends_on_nothing_of_the_driver() {
    let deps = workspace_dependencies(true);
    assert_eq!(
        deps.get("h5gds-route"),
        Some(&vec!["h5gds-runtime".to_string()]),
        "{deps:?}"
    );
}

#[test]
fn nothing_depends_on_the_programs_or_the_test_only_crates() {
    let deps = workspace_dependencies(false);
    let top = [
        "h5gds-python",
        "h5gds-cli",
        "h5gds-tests",
        "h5gds-cuda-emulator",
        "h5gds-nvcomp-emulator",
    ];
    for (krate, on) in &deps {
        let forbidden: Vec<&&str> = top.iter().filter(|t| on.iter().any(|d| d == *t)).collect();
        assert!(
            forbidden.is_empty(),
            "{krate} depends on {forbidden:?} outside its tests"
        );
    }
    assert!(deps.len() >= 15, "{deps:?}");
}
