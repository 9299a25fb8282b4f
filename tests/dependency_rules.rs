//! The dependency rules between the workspace's crates (ARCHITECTURE.md, "Dependency rules"),
//! read from `cargo metadata`: the low-level crates depend on no other crate of the workspace,
//! `route` on nothing at all, and nothing but tests depends on the programs and test-only
//! crates at the top.

use std::collections::BTreeMap;
use std::process::Command;

/// `cargo metadata` of the workspace with `option` (`--no-deps`: the manifests only;
/// `--all-features`: also the resolved graph, every feature on), as builds for this machine see
/// it. Online on purpose: a graph of every feature needs crates a plain build never fetched (the
/// `mpi` feature's), and an unfiltered one every platform's (Windows-only crates), so on a fresh
/// cargo home cargo fetches them here, from the registry the build itself used.
fn cargo_metadata(option: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", option])
        .args(["--filter-platform", &host_triple()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo's JSON")
}

/// The target triple cargo builds for by default here (`host:` in `cargo -vV`).
fn host_triple() -> String {
    let out = Command::new(env!("CARGO"))
        .arg("-vV")
        .output()
        .expect("cargo -vV runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("cargo -vV names the host")
        .trim()
        .to_string()
}

/// Each workspace crate's dependencies on other workspace crates, by name: normal and build ones,
/// and dev ones too with `dev` (tests may use the shared test support, `h5gds-tests`).
fn workspace_dependencies(dev: bool) -> BTreeMap<String, Vec<String>> {
    let meta = cargo_metadata("--no-deps");
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

/// cuFile is reached through the runtime (`h5gds_runtime::cufile`, which decodes its results and
/// re-exports the bindings), so no crate above it decodes cuFile's codes on its own; only the
/// test-only crates, which play libcufile's part or call it raw, use the bindings directly.
#[test]
fn only_the_runtime_and_the_test_only_crates_use_the_cufile_bindings() {
    let deps = workspace_dependencies(true);
    let allowed = ["h5gds-runtime", "h5gds-cuda-emulator", "h5gds-tests"];
    let users: Vec<&String> = deps
        .iter()
        .filter(|(_, on)| on.iter().any(|d| d == "cufile-sys"))
        .map(|(krate, _)| krate)
        .collect();
    assert!(
        users.iter().all(|k| allowed.contains(&k.as_str())),
        "cufile-sys used by {users:?}; reach cuFile through h5gds_runtime::cufile"
    );
    assert!(users.iter().any(|k| *k == "h5gds-runtime"), "{users:?}");
}

/// Nor does a crate above the runtime decode cuFile's results through the re-exported bindings
/// (`h5gds_runtime::cufile::sys`): a status is checked, and a transfer's return read, only by
/// `h5gds_runtime::cufile` (`check`, `transferred`), which names the call and the code.
#[test]
fn cufile_results_are_decoded_only_by_the_runtime() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let above = [
        "vfd/src",
        "vfd-gds-compat/src",
        "array-io/src",
        "gpu-codec/src",
        "python/src",
        "info/src",
        "cli/src",
        "benches/src",
    ];
    for krate in above {
        for (module, text) in modules(&root.join(krate)) {
            for decoding in ["sys::succeeded", "op_error_name", "CUfileOpError("] {
                assert!(
                    !text.contains(decoding),
                    "{krate} {module} decodes cuFile results itself ({decoding}); use \
                     h5gds_runtime::cufile"
                );
            }
        }
    }
}

#[test]
fn the_gpu_codec_depends_on_the_runtime_not_on_the_driver() {
    let deps = workspace_dependencies(true);
    let codec = deps.get("h5gds-gpu-codec").expect("h5gds-gpu-codec");
    assert!(codec.contains(&"h5gds-runtime".to_string()), "{codec:?}");
    assert!(!codec.contains(&"h5gds-vfd".to_string()), "{codec:?}");
}

#[test]
fn the_chunk_codec_depends_on_route_and_the_runtime_only() {
    let deps = workspace_dependencies(true);
    let mut codec = deps
        .get("h5gds-chunk-codec")
        .expect("h5gds-chunk-codec")
        .clone();
    codec.sort();
    assert_eq!(codec, ["h5gds-route", "h5gds-runtime"], "{codec:?}");
}

#[test]
fn route_depends_on_nothing() {
    let deps = workspace_dependencies(true);
    assert_eq!(deps.get("h5gds-route"), Some(&Vec::new()), "{deps:?}");
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

/// The modules of the crate whose sources are under `src`, by path (`io::strided`), with each
/// one's source text (test modules cut off).
fn modules(src: &std::path::Path) -> BTreeMap<String, String> {
    fn walk(dir: &std::path::Path, src: &std::path::Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("a source directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(&path, src, out);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("lib" | "main" | "mod")
            ) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            let text = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            out.insert(parts.join("::"), text);
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The module paths a source text names through `crate::` (also inside `use crate::{..}`),
/// without comments.
fn named_paths(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            paths.extend(inner.split(',').map(|item| {
                item.trim()
                    .split(|c: char| !ident(c))
                    .next()
                    .unwrap_or("")
                    .to_string()
            }));
        } else {
            paths.push(rest.split(|c: char| !ident(c)).next().unwrap_or("").into());
        }
    }
    paths
}

/// A cycle among the crate's modules (`a` uses `b` uses ... `a`), if there is one. A module using
/// its own parent or child is not counted: a parent re-exports what its children define.
fn module_cycle(src: &std::path::Path) -> Option<Vec<String>> {
    let mods = modules(src);
    let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, text) in &mods {
        let mut to = Vec::new();
        for path in named_paths(text) {
            let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
            let target = (1..=parts.len())
                .rev()
                .map(|k| parts[..k].join("::"))
                .find(|m| mods.contains_key(m));
            let Some(target) = target else { continue };
            let (target, _) = mods.get_key_value(&target).expect("a module");
            let related = target == name
                || target.starts_with(&format!("{name}::"))
                || name.starts_with(&format!("{target}::"))
                || name.is_empty();
            if !related && !to.contains(&target.as_str()) {
                to.push(target.as_str());
            }
        }
        edges.insert(name.as_str(), to);
    }
    // Depth-first search with the path on the stack: an edge back into it closes a cycle.
    fn visit<'a>(
        at: &'a str,
        edges: &BTreeMap<&'a str, Vec<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| *m == at) {
            let mut cycle: Vec<String> = path[start..].iter().map(|m| m.to_string()).collect();
            cycle.push(at.to_string());
            return Some(cycle);
        }
        if done.contains(&at) {
            return None;
        }
        path.push(at);
        for next in edges.get(at).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.push(at);
        None
    }
    let mut done = Vec::new();
    edges
        .keys()
        .find_map(|m| visit(m, &edges, &mut Vec::new(), &mut done))
}

/// Every workspace crate's source directory, for the checks that read the sources.
const CRATE_SOURCES: [&str; 16] = [
    "runtime/src",
    "cufile-sys/src",
    "nvcomp-sys/src",
    "vfd/src",
    "vfd-gds-compat/src",
    "route/src",
    "engine/src",
    "gpu-codec/src",
    "chunk-codec/src",
    "array-io/src",
    "python/src",
    "info/src",
    "cli/src",
    "benches/src",
    "emulators/cuda/src",
    "emulators/nvcomp/src",
];

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in CRATE_SOURCES {
        let src = root.join(krate);
        assert!(!modules(&src).is_empty(), "{krate} has no sources");
        assert_eq!(module_cycle(&src), None, "{krate}");
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let dir = std::env::temp_dir().join(format!("h5gds-cycle-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("io")).expect("a scratch source tree");
    let files = [
        ("lib.rs", "mod a;\nmod io;\n"),
        ("a.rs", "use crate::io::b::Thing;\n"),
        ("io/mod.rs", "pub mod b;\n"),
        ("io/b.rs", "pub struct Thing;\nfn f() { crate::a::g() }\n"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("a scratch file");
    }
    let cycle = module_cycle(&dir);
    std::fs::remove_dir_all(&dir).expect("scratch removed");
    assert_eq!(
        cycle,
        Some(vec!["a".to_string(), "io::b".to_string(), "a".to_string()])
    );
}

/// Where a source text binds an HDF5 function itself instead of through the one binding
/// (`h5gds_runtime::hdf5::api`): a symbol looked up by name (`c"H5Dread"`, `b"H5Dread\0"`), a
/// function declared in an `extern` block (`fn H5Dread(...);`, `static H5E_ERR_CLS_g`), or
/// hdf5-metno-sys's declaration of one used (`hdf5_sys::h5d::H5Dread`; its constants and
/// types, such as `H5P_DEFAULT` or `hid_t`, are no binding). One line per finding.
fn hdf5_bindings(text: &str) -> Vec<String> {
    // A name as HDF5 spells functions and globals (H5Dread, H5FD_get_class, H5E_ERR_CLS_g), not
    // constants (H5P_DEFAULT) nor types (H5FD_t); plugins' entry points (H5PLget_plugin_info)
    // are looked up in plugins, not in HDF5.
    let is_hdf5_symbol = |name: &str| {
        name.starts_with("H5")
            && !name.starts_with("H5GDS")
            && !name.starts_with("H5PLget_plugin_")
            && (name.chars().any(|c| c.is_ascii_lowercase()) && !name.ends_with("_t"))
    };
    let word = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let at = number + 1;
        for quote in ["c\"", "b\""] {
            for (i, _) in code.match_indices(quote) {
                let name = word(&code[i + 2..]);
                if is_hdf5_symbol(&name) {
                    found.push(format!("line {at}: looks up {name} by name"));
                }
            }
        }
        for (i, _) in code.match_indices('"') {
            if code[..i].ends_with(['b', 'c']) {
                continue; // a byte or C string: seen above
            }
            let name = word(&code[i + 1..]);
            if is_hdf5_symbol(&name) && code[i + 1 + name.len()..].starts_with("\\0") {
                found.push(format!("line {at}: looks up {name} by name"));
            }
        }
        for keyword in ["fn ", "static "] {
            for (i, _) in code.match_indices(keyword) {
                let name = word(&code[i + keyword.len()..]);
                let exported = code[..i].trim_end().ends_with("extern \"C\"");
                if is_hdf5_symbol(&name) && !exported {
                    found.push(format!("line {at}: declares {name}"));
                }
            }
        }
        for (i, _) in code.match_indices("hdf5_sys::") {
            let path: String = code[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let name = path.rsplit("::").next().unwrap_or("");
            if is_hdf5_symbol(name) {
                found.push(format!("line {at}: uses hdf5-metno-sys's {path}"));
            }
        }
    }
    found
}

/// Every `.rs` file under `dir`, by path.
fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
            out.push(path);
        }
    }
}

#[test]
fn hdf5_functions_are_bound_only_in_the_runtimes_hdf5_api() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let binding = root.join("runtime/src/hdf5");
    let mut files = Vec::new();
    for dir in CRATE_SOURCES.iter().chain(&["tests"]) {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "{} Rust files", files.len());
    let mut bound = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&binding)) {
        let text = std::fs::read_to_string(file).expect("a source file");
        for finding in hdf5_bindings(&text) {
            bound.push(format!("{}: {finding}", file.display()));
        }
    }
    assert!(
        bound.is_empty(),
        "HDF5 bound outside runtime/src/hdf5/api.rs (declare the function there and call it \
         through a library's table, or array_io::hdf5_raw's linked one):\n{}",
        bound.join("\n")
    );
    // The Python package calls HDF5 only through h5py and the extension: no ctypes binding.
    let package = root.join("python/h5gds");
    for entry in std::fs::read_dir(&package).expect("the package") {
        let path = entry.expect("an entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("py") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a module");
        for (number, line) in text.lines().enumerate() {
            let loads = ["CDLL", "cdll", "PyDLL"].iter().any(|l| line.contains(l));
            let hdf5_call = line.match_indices(".H5").any(|(i, _)| {
                line[i + 3..].starts_with(|c: char| c.is_ascii_uppercase())
                    && line[i + 1..].contains('(')
            });
            assert!(
                !hdf5_call && (!loads || !line.to_lowercase().contains("hdf5")),
                "{}:{}: HDF5 through ctypes: {line}",
                path.display(),
                number + 1
            );
        }
    }
}

#[test]
fn the_hdf5_binding_check_finds_bindings() {
    // Built with format! so that this file holds none of the texts it checks for.
    let (read, open, global) = ("H5Dread", "H5FDopen", "H5E_ERR_CLS_g");
    let (plugin_info, exported) = ("H5PLget_plugin_info", "H5Pset_fapl_gds");
    let bound = [
        format!("let p = libc::dlsym(handle, c\"{read}\".as_ptr());"),
        format!("let p = lib.get(b\"{read}\\0\")?;"),
        format!("extern \"C\" {{\n    fn {open}(name: *const c_char) -> *mut c_void;\n}}"),
        format!("let f = hdf5_sys::h5d::{read}(d, t, m, f, p, buf);"),
        format!("extern \"C\" {{ static {global}: hid_t; }}"),
    ];
    for text in &bound {
        assert_eq!(hdf5_bindings(text).len(), 1, "{text}");
    }
    let not_bound = [
        format!("let status = unsafe {{ (api.{read}?)(d, t, m, f, p, buf) }};"),
        "let p = hdf5_sys::h5p::H5P_DEFAULT; let t: hdf5_sys::h5fd::H5FD_t;".to_string(),
        format!("pub extern \"C\" fn {plugin_info}() -> *const c_void {{"),
        format!("pub unsafe extern \"C\" fn {exported}(fapl: hid_t) -> herr_t {{"),
        format!("// {read} through c\"{read}\""),
        format!("let v = getenv(c\"{}\");", "H5GDS_LOG"),
    ];
    for text in &not_bound {
        assert_eq!(hdf5_bindings(text), Vec::<String>::new(), "{text}");
    }
}

/// Every package `krate` (a workspace crate) depends on, directly or through others: normal and
/// build dependencies, with every feature on, workspace and external, by package name (an
/// external crate's own name, not the name it is renamed to), from cargo's resolved graph.
fn all_dependencies(krate: &str) -> Vec<String> {
    let meta = cargo_metadata("--all-features");
    let name_of: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let edges: BTreeMap<&str, Vec<&str>> = meta["resolve"]["nodes"]
        .as_array()
        .expect("the resolved graph")
        .iter()
        .filter_map(|node| {
            let deps = node["deps"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| {
                    let kinds = d["dep_kinds"].as_array().into_iter().flatten();
                    kinds.map(|k| k["kind"].as_str()).any(|k| k != Some("dev"))
                })
                .filter_map(|d| d["pkg"].as_str())
                .collect();
            Some((node["id"].as_str()?, deps))
        })
        .collect();
    let workspace = meta["workspace_members"].as_array().expect("members");
    let start = workspace
        .iter()
        .filter_map(|id| id.as_str())
        .find(|id| name_of.get(id) == Some(&krate))
        .unwrap_or_else(|| panic!("{krate} is no workspace crate"));
    let (mut seen, mut todo) = (vec![start], vec![start]);
    while let Some(id) = todo.pop() {
        for &dep in edges.get(id).into_iter().flatten() {
            if !seen.contains(&dep) {
                seen.push(dep);
                todo.push(dep);
            }
        }
    }
    let mut names: Vec<String> = seen[1..].iter().map(|id| name_of[id].to_string()).collect();
    names.sort();
    names.dedup();
    names
}

/// The engine (one implementation of each way of moving a dataset, beneath array-io and the
/// Python extension) holds neither face's types (ndarray, pyo3) nor an HDF5 binding: the faces
/// bring those. CUDA only through the runtime (cudarc is no direct dependency). The faces' own
/// graphs show that the walks find such crates.
#[test]
fn the_engine_depends_on_neither_face_nor_hdf5_nor_cuda() {
    let forbidden = ["pyo3", "numpy", "ndarray", "hdf5-metno", "hdf5-metno-sys"];
    let engine = all_dependencies("h5gds-engine");
    let found: Vec<&String> = engine
        .iter()
        .filter(|d| forbidden.contains(&d.as_str()))
        .collect();
    assert!(found.is_empty(), "h5gds-engine depends on {found:?}");
    assert!(engine.iter().any(|d| d == "h5gds-route"), "{engine:?}");
    let faces = [
        all_dependencies("array-io"),
        all_dependencies("h5gds-python"),
    ]
    .concat();
    for krate in forbidden {
        assert!(faces.iter().any(|d| d == krate), "{krate} not found");
    }
    let direct = direct_dependencies("h5gds-engine");
    assert!(!direct.iter().any(|d| d == "cudarc"), "{direct:?}");
    let face = direct_dependencies("array-io");
    assert!(
        face.iter().any(|d| d == "cudarc"),
        "cudarc not found in {face:?}"
    );
}

/// The crates `krate` names in its manifest, of every kind.
fn direct_dependencies(krate: &str) -> Vec<String> {
    let meta = cargo_metadata("--no-deps");
    let package = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"].as_str() == Some(krate))
        .unwrap_or_else(|| panic!("{krate} is no workspace crate"));
    package["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| Some(d["name"].as_str()?.to_string()))
        .collect()
}

/// What the faces (`array-io/src`, `python/src`) may name of the engine: its one error, the
/// policy's entry points and the mechanisms the faces still plug into (issue 51 shrinks this list
/// to the engine's dataset handle). A face naming anything else fails
/// `the_faces_name_only_the_engines_listed_items`, so that a new reach into the engine's
/// internals is a visible change of this list.
const ENGINE_ITEMS_THE_FACES_NAME: &[&str] = &[
    "h5gds_engine::CompressedWrite",
    "h5gds_engine::Dataset",
    "h5gds_engine::DeviceArray",
    "h5gds_engine::DeviceMemory",
    "h5gds_engine::Error",
    "h5gds_engine::Error::check_bools",
    "h5gds_engine::ErrorKind",
    "h5gds_engine::Hdf5Lock",
    "h5gds_engine::Kept",
    "h5gds_engine::Memory",
    "h5gds_engine::Selection",
    "h5gds_engine::collective",
    "h5gds_engine::collective::Tile",
    "h5gds_engine::collective::TileFile",
    "h5gds_engine::collective::Writer",
    "h5gds_engine::facts",
    "h5gds_engine::opening",
    "h5gds_engine::staged",
    "h5gds_engine::tiles",
    "h5gds_engine::tiles::Decomposition",
    "h5gds_engine::tiles::read_box",
    "h5gds_engine::tiles::share",
];

/// Every path a source text names under `h5gds_engine::`, `use` groups expanded (`a::{b, c::{d,
/// e}}` names `a::b`, `a::c::d` and `a::c::e`; `self` names the group's module; an `as` rename is
/// dropped), without comments.
fn engine_paths(text: &str) -> Vec<String> {
    /// Reads one use tree at `code`, under `prefix`; returns the paths and where it ended.
    fn tree(prefix: &str, code: &str) -> (Vec<String>, usize) {
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let name_len = code.find(|c: char| !ident(c)).unwrap_or(code.len());
        let (name, rest) = code.split_at(name_len);
        let path = match name {
            "self" | "" => prefix.to_string(),
            _ => format!("{prefix}::{name}"),
        };
        let after = match (name, rest.strip_prefix("::")) {
            (_, Some(after)) => after,
            ("", None) if rest.starts_with('{') => rest,
            _ => return (vec![path], name_len),
        };
        let Some(mut group) = after.strip_prefix('{') else {
            let (paths, used) = tree(&path, after);
            return (paths, code.len() - after.len() + used);
        };
        let (mut paths, start) = (Vec::new(), code.len() - group.len());
        loop {
            group = group.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
            if let Some(end) = group.strip_prefix('}') {
                return (paths, code.len() - end.len());
            }
            let (inner, used) = tree(&path, group);
            paths.extend(inner);
            group = &group[used..];
            // An `as` rename names nothing more.
            let renamed = group.trim_start().strip_prefix("as ");
            if let Some(alias) = renamed.map(str::trim_start) {
                group = &alias[alias.find(|c: char| !ident(c)).unwrap_or(alias.len())..];
            }
            if group.is_empty() || code.len() - group.len() < start {
                return (paths, code.len());
            }
        }
    }
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("h5gds_engine::") {
        paths.extend(tree("h5gds_engine", &code[at + "h5gds_engine::".len()..]).0);
    }
    paths
}

#[test]
fn the_faces_name_only_the_engines_listed_items() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    rust_files(&root.join("array-io/src"), &mut files);
    rust_files(&root.join("python/src"), &mut files);
    let (mut unlisted, mut named) = (Vec::new(), std::collections::BTreeSet::new());
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a source file");
        for path in engine_paths(&text) {
            if !ENGINE_ITEMS_THE_FACES_NAME.contains(&path.as_str()) {
                unlisted.push(format!("{}: {path}", file.display()));
            }
            named.insert(path);
        }
    }
    assert!(
        unlisted.is_empty(),
        "the faces name engine items outside ENGINE_ITEMS_THE_FACES_NAME (reach the engine \
         through its public API, or add the item to the list on purpose): {unlisted:#?}"
    );
    // The list only shrinks: an item no face names any more leaves it.
    let unused: Vec<_> = ENGINE_ITEMS_THE_FACES_NAME
        .iter()
        .filter(|item| !named.contains(**item))
        .collect();
    assert!(
        unused.is_empty(),
        "ENGINE_ITEMS_THE_FACES_NAME lists items no face names: remove them {unused:#?}"
    );
}

#[test]
fn the_engine_path_check_expands_use_groups() {
    let text = "use h5gds_engine::policy::{self, write::{CompressedWrite, Memory as M}};\n\
                use h5gds_engine::{Error as E, ErrorKind};\n\
                // h5gds_engine::in_a_comment\n\
                let e: h5gds_engine::Error = h5gds_engine::stored::direct_file(f);";
    assert_eq!(
        engine_paths(text),
        [
            "h5gds_engine::policy",
            "h5gds_engine::policy::write::CompressedWrite",
            "h5gds_engine::policy::write::Memory",
            "h5gds_engine::Error",
            "h5gds_engine::ErrorKind",
            "h5gds_engine::Error",
            "h5gds_engine::stored::direct_file",
        ]
    );
    assert!(!ENGINE_ITEMS_THE_FACES_NAME.contains(&"h5gds_engine::stored::chunk_cache"));
}
