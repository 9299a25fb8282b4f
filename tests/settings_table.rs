//! One settings table: every `H5GDS_*` variable the product code reads (the crates and the Python
//! package, not the emulators or tests) is a row of `h5gds_runtime::settings::SETTINGS`, so
//! `h5gds info` and docs/settings.md can show them all.

use std::path::Path;

fn variables_in(dir: &Path, found: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            variables_in(&path, found);
            continue;
        }
        if !matches!(path.extension().and_then(|e| e.to_str()), Some("rs" | "py")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a source file");
        for (at, _) in text.match_indices("H5GDS_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // The emulators' and the tests' switches are not settings of the product.
            let test_only = [
                "H5GDS_EMU_",
                "H5GDS_TEST_",
                "H5GDS_REQUIRE_",
                "H5GDS_EXPECT_",
            ];
            if name.len() > "H5GDS_".len() && !test_only.iter().any(|p| name.starts_with(p)) {
                found.push((name, path.display().to_string()));
            }
        }
    }
}

#[test]
fn every_variable_the_product_reads_is_in_the_settings_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for dir in [
        "runtime/src",
        "vfd/src",
        "route/src",
        "engine/src",
        "gpu-codec/src",
        "chunk-codec/src",
        "array-io/src",
        "python/src",
        "python/h5gds",
        "info/src",
        "cli/src",
    ] {
        variables_in(&root.join(dir), &mut found);
    }
    assert!(
        found.iter().any(|(name, _)| name == "H5GDS_USE_VFD_GDS"),
        "the scan finds the variables: {found:?}"
    );
    let table: Vec<&str> = h5gds_runtime::settings::SETTINGS
        .iter()
        .flat_map(|s| s.aliases.iter().copied().chain([s.env]))
        .collect();
    let missing: Vec<_> = found
        .iter()
        .filter(|(name, _)| !table.contains(&name.as_str()))
        .collect();
    assert!(missing.is_empty(), "not in the settings table: {missing:?}");
}
