//! The cufile.json in effect, for the one key the emulator models: `properties.use_pci_p2pdma`.
//!
//! cuFile reads its configuration from `/etc/cufile.json`, or from the file the
//! `CUFILE_ENV_PATH_JSON` environment variable names ("Workload/application-specific parameters
//! can be set by using the CUFILE_ENV_PATH_JSON environment variable that is set to point to an
//! alternate cufile.json file": NVIDIA GPUDirect Storage configuration guide, "GPUDirect Storage
//! Parameters"). PCI P2PDMA without nvidia-fs is switched on there: "Add the following config
//! parameter into the /etc/cufile.json or App-specific JSON file: `{"properties":
//! {"use_pci_p2pdma": true}}`" (NVIDIA, "GDS Support for NVMe Drives Using Linux PCI P2PDMA
//! Support", "Setting cufile.json Configuration"); cuFile 1.20 reads it back through
//! `cuFileGetParameterBool(CUFILE_PARAM_USE_PCIP2PDMA)` (`cufile.h`), before the driver opens.
//!
//! The emulator models that: with `CUFILE_ENV_PATH_JSON` set, that file's
//! `properties.use_pci_p2pdma` (false where the key is absent, cuFile's default; a file that
//! cannot be read or parsed reads as false, with a line on stderr). Without it, the emulated
//! machine's own `/etc/cufile.json` (the real one of the machine running the tests is not the
//! emulated machine's): `use_pci_p2pdma` true wherever the emulated machine has a GDS kernel path
//! (`H5GDS_EMU_GDS=1` or `p2pdma`; an emulated nvidia-fs cannot appear in
//! `/proc/driver/nvidia-fs`, where the driver looks before it opens cuFile under
//! `compat_mode=auto`, so the emulated nvidia-fs machine asks for P2PDMA too). cufile.json files
//! carry `//` comments (NVIDIA's own does), which are skipped.

use std::sync::OnceLock;

/// `properties.use_pci_p2pdma` of the cufile.json in effect, read once.
pub fn use_pci_p2pdma() -> bool {
    static VALUE: OnceLock<bool> = OnceLock::new();
    *VALUE.get_or_init(|| {
        let Some(path) = std::env::var_os("CUFILE_ENV_PATH_JSON").filter(|p| !p.is_empty()) else {
            return crate::switches::get().gds;
        };
        match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| use_pci_p2pdma_in(&text))
        {
            Ok(value) => value,
            Err(err) => {
                crate::stderr::stderr_line(&format!(
                    "h5gds-emu: CUFILE_ENV_PATH_JSON={path:?}: {err}; use_pci_p2pdma reads false"
                ));
                false
            }
        }
    })
}

/// Whether cuFile moves device data GPU-direct on the emulated machine: nvidia-fs present
/// (`H5GDS_EMU_GDS=1`), or PCI P2PDMA present (`p2pdma`) and asked for in the configuration.
pub fn gds_path() -> bool {
    let switches = crate::switches::get();
    switches.gds && (!switches.p2pdma || use_pci_p2pdma())
}

/// `properties.use_pci_p2pdma` in cufile.json text (false where absent), or why the text is not
/// a cufile.json.
pub fn use_pci_p2pdma_in(text: &str) -> Result<bool, String> {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        at: 0,
    };
    let value = parser.value()?;
    parser.skip_blank()?;
    if parser.at != parser.bytes.len() {
        return Err(format!("text after the JSON value at byte {}", parser.at));
    }
    let Json::Object(top) = value else {
        return Err("not a JSON object".into());
    };
    let properties = top.iter().find(|(k, _)| k == "properties").map(|(_, v)| v);
    match properties {
        None => Ok(false),
        Some(Json::Object(props)) => {
            match props
                .iter()
                .find(|(k, _)| k == "use_pci_p2pdma")
                .map(|(_, v)| v)
            {
                None => Ok(false),
                Some(Json::Bool(b)) => Ok(*b),
                Some(_) => Err("properties.use_pci_p2pdma is not a boolean".into()),
            }
        }
        Some(_) => Err("\"properties\" is not an object".into()),
    }
}

/// A JSON value, as far as the emulator needs it (numbers and strings are kept as nothing).
enum Json {
    Object(Vec<(String, Json)>),
    Bool(bool),
    Other,
}

/// A small JSON reader that skips `//` and `/* */` comments, as cuFile's reader does.
struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn fail<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} at byte {}", self.at))
    }

    /// Skips white space and comments.
    fn skip_blank(&mut self) -> Result<(), String> {
        loop {
            match (self.peek(), self.bytes.get(self.at + 1)) {
                (Some(b' ' | b'\t' | b'\r' | b'\n'), _) => self.at += 1,
                (Some(b'/'), Some(b'/')) => {
                    while self.peek().is_some_and(|b| b != b'\n') {
                        self.at += 1;
                    }
                }
                (Some(b'/'), Some(b'*')) => {
                    let rest = &self.bytes[self.at + 2..];
                    match rest.windows(2).position(|w| w == b"*/") {
                        Some(end) => self.at += 2 + end + 2,
                        None => return self.fail("unterminated comment"),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.skip_blank()?;
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(|_| Json::Other),
            Some(b't') => self.word("true", Json::Bool(true)),
            Some(b'f') => self.word("false", Json::Bool(false)),
            Some(b'n') => self.word("null", Json::Other),
            Some(b'-' | b'0'..=b'9') => {
                while self
                    .peek()
                    .is_some_and(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    self.at += 1;
                }
                Ok(Json::Other)
            }
            _ => self.fail("expected a JSON value"),
        }
    }

    fn word(&mut self, word: &str, value: Json) -> Result<Json, String> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            self.fail("expected a JSON value")
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.at += 1; // the opening quote
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return self.fail("unterminated string"),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                Some(b'\\') => {
                    // Escapes are kept as written: keys the emulator looks for have none.
                    out.extend_from_slice(
                        &self.bytes[self.at..(self.at + 2).min(self.bytes.len())],
                    );
                    self.at += 2;
                }
                Some(b) => {
                    out.push(b);
                    self.at += 1;
                }
            }
        }
    }

    /// After an element: a comma (then true, more follows) or `close` (then false).
    fn separator(&mut self, close: u8) -> Result<bool, String> {
        self.skip_blank()?;
        match self.peek() {
            Some(b',') => {
                self.at += 1;
                self.skip_blank()?;
                // cuFile's own cufile.json has no trailing commas, but tolerate them.
                if self.peek() == Some(close) {
                    self.at += 1;
                    return Ok(false);
                }
                Ok(true)
            }
            Some(b) if b == close => {
                self.at += 1;
                Ok(false)
            }
            _ => self.fail("expected ',' or the end of the object or array"),
        }
    }

    fn object(&mut self) -> Result<Json, String> {
        self.at += 1;
        let mut members = Vec::new();
        self.skip_blank()?;
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_blank()?;
            if self.peek() != Some(b'"') {
                return self.fail("expected a key");
            }
            let key = self.string()?;
            self.skip_blank()?;
            if self.peek() != Some(b':') {
                return self.fail("expected ':'");
            }
            self.at += 1;
            members.push((key, self.value()?));
            if !self.separator(b'}')? {
                return Ok(Json::Object(members));
            }
        }
    }

    fn array(&mut self) -> Result<Json, String> {
        self.at += 1;
        self.skip_blank()?;
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Json::Other);
        }
        loop {
            self.value()?;
            if !self.separator(b']')? {
                return Ok(Json::Other);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::use_pci_p2pdma_in;

    #[test]
    fn the_key_is_read_from_properties_with_comments_skipped() {
        let text = r#"{
            // NOTE : Application can override custom configuration via export CUFILE_ENV_PATH_JSON=<filepath>
            "logging": { "dir": "/var/log//cufile", "level": "ERROR" },
            /* a block comment */
            "properties": {
                "max_direct_io_size_kb" : 16384,
                "posix_pool_slab_size_kb" : [ 4, 1024, 16384],
                "allow_compat_mode": true,
                "use_pci_p2pdma": true
            }
        }"#;
        assert_eq!(use_pci_p2pdma_in(text), Ok(true));
        assert_eq!(
            use_pci_p2pdma_in(r#"{"properties": {"use_pci_p2pdma": false}}"#),
            Ok(false)
        );
    }

    #[test]
    fn an_absent_key_is_cufiles_default_false() {
        assert_eq!(use_pci_p2pdma_in("{}"), Ok(false));
        assert_eq!(
            use_pci_p2pdma_in(r#"{"properties": {"allow_compat_mode": true,}}"#),
            Ok(false)
        );
    }

    #[test]
    fn what_is_not_a_cufile_json_is_an_error() {
        assert!(use_pci_p2pdma_in("").is_err());
        assert!(use_pci_p2pdma_in("[1, 2]").is_err());
        assert!(use_pci_p2pdma_in(r#"{"properties": {"use_pci_p2pdma": "yes"}}"#).is_err());
        assert!(use_pci_p2pdma_in(r#"{"properties": "#).is_err());
        assert!(use_pci_p2pdma_in("{} x").is_err());
    }
}
