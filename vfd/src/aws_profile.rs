//! The shared AWS config and credentials files (`~/.aws/config`, `~/.aws/credentials`, or
//! `AWS_CONFIG_FILE` / `AWS_SHARED_CREDENTIALS_FILE`), read for the profile `AWS_PROFILE` names
//! (else `AWS_DEFAULT_PROFILE`, else `default`), as the AWS CLI reads them: the config file's
//! section is `[profile NAME]` (`[default]` for the default profile), the credentials file's
//! `[NAME]`, and a key in the credentials file wins over the same key in the config file.
//! object_store reads only the environment, so `remote` puts what a profile holds under it.
//!
//! Parsed by the `configparser` crate (Python's configparser format, which the AWS CLI's files
//! follow). A leaf: it knows nothing of object_store. Values are never shown: errors name the
//! profile, the file and the key.

use configparser::ini::{Ini, IniDefault};
use std::collections::HashMap;
use std::path::PathBuf;

/// One profile's settings as the files give them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Profile {
    pub(crate) name: String,
    /// Where `aws_access_key_id` came from, where the profile holds keys.
    pub(crate) keys_file: Option<PathBuf>,
    pub(crate) access_key_id: Option<String>,
    pub(crate) secret_access_key: Option<String>,
    pub(crate) session_token: Option<String>,
    pub(crate) region: Option<String>,
    pub(crate) endpoint_url: Option<String>,
    /// The file the profile's `region` and `endpoint_url` came from (the config file, usually).
    pub(crate) settings_file: Option<PathBuf>,
    /// Keys of the profile that get credentials in ways h5gds does not follow (`role_arn`,
    /// `credential_process`, `sso_session`, ...), for the error where no keys are found.
    pub(crate) other_sources: Vec<String>,
}

impl Profile {
    /// Both keys, or neither; half a pair is an error naming the file and the profile.
    pub(crate) fn keys(&self) -> Result<Option<(&str, &str)>, String> {
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => Ok(Some((id, secret))),
            (None, None) => Ok(None),
            (id, _) => Err(format!(
                "AWS profile '{}' in {} has {} but not {}",
                self.name,
                self.keys_file
                    .as_deref()
                    .map_or("the AWS files".into(), |f| f.display().to_string()),
                if id.is_some() {
                    "aws_access_key_id"
                } else {
                    "aws_secret_access_key"
                },
                if id.is_some() {
                    "aws_secret_access_key"
                } else {
                    "aws_access_key_id"
                },
            )),
        }
    }
}

/// The keys of a profile that name another way to get credentials.
const OTHER_SOURCES: [&str; 6] = [
    "role_arn",
    "credential_process",
    "sso_session",
    "sso_start_url",
    "web_identity_token_file",
    "credential_source",
];

/// A file named by a variable, with `~` as the AWS CLI expands it; else `~/.aws/<name>`.
fn file_path(env: &dyn Fn(&str) -> Option<String>, var: &str, name: &str) -> Option<PathBuf> {
    let home = env("HOME");
    match env(var) {
        Some(path) => match (path.strip_prefix("~/"), &home) {
            (Some(rest), Some(home)) => Some(PathBuf::from(home).join(rest)),
            _ => Some(PathBuf::from(path)),
        },
        None => home.map(|h| PathBuf::from(h).join(".aws").join(name)),
    }
}

/// A file's sections by name, each its keys and values.
type Sections = HashMap<String, HashMap<String, String>>;

/// The sections of one file, `None` where it does not exist.
fn sections(path: &PathBuf) -> Result<Option<Sections>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read the AWS file {}: {e}", path.display())),
    };
    let mut defaults = IniDefault::default();
    // Profile names and keys as written (the AWS CLI's are case-sensitive); a line before any
    // section belongs to none (not to `[default]`, configparser's default section name).
    defaults.case_sensitive = true;
    defaults.default_section = "\u{0}outside any section".into();
    // The config file's nested settings (`s3 =` then indented lines) are continuation lines.
    defaults.multiline = true;
    let mut ini = Ini::new_from_defaults(defaults);
    let parsed = ini
        .read(text)
        .map_err(|e| format!("cannot parse the AWS file {}: {e}", path.display()))?;
    Ok(Some(
        parsed
            .into_iter()
            .map(|(section, values)| {
                let values = values
                    .into_iter()
                    .filter_map(|(k, v)| Some((k, v?.trim().to_string())))
                    .filter(|(_, v)| !v.is_empty())
                    .collect();
                (section.trim().to_string(), values)
            })
            .collect(),
    ))
}

/// The profile in effect, from the files the environment `env` points at. `Ok(None)` where the
/// default profile is in neither file (or there are none); an error where a profile named by
/// `AWS_PROFILE` is in neither, or a file cannot be read or parsed.
pub(crate) fn load(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Profile>, String> {
    let named = env("AWS_PROFILE")
        .map(|p| ("AWS_PROFILE", p))
        .or_else(|| env("AWS_DEFAULT_PROFILE").map(|p| ("AWS_DEFAULT_PROFILE", p)));
    let name = named
        .as_ref()
        .map_or("default".to_string(), |(_, p)| p.clone());
    let config = file_path(env, "AWS_CONFIG_FILE", "config");
    let credentials = file_path(env, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
    // The config file's section names, the first found taken (`[profile default]` stands for
    // `[default]` too), then the credentials file's, whose keys win.
    let config_sections = if name == "default" {
        vec!["default".to_string(), "profile default".to_string()]
    } else {
        vec![format!("profile {name}")]
    };
    let mut found: Vec<(PathBuf, HashMap<String, String>)> = Vec::new();
    for (file, names) in [
        (&config, config_sections),
        (&credentials, vec![name.clone()]),
    ] {
        let Some(file) = file else { continue };
        let Some(mut all) = sections(file)? else {
            continue;
        };
        if let Some(values) = names.iter().find_map(|n| all.remove(n)) {
            found.push((file.clone(), values));
        }
    }
    if found.is_empty() {
        return match named {
            Some((var, _)) => Err(format!(
                "the AWS profile '{name}' ({var}) is in neither {} nor {}",
                config
                    .as_deref()
                    .map_or("a config file (no HOME)".into(), |f| f
                        .display()
                        .to_string()),
                credentials
                    .as_deref()
                    .map_or("a credentials file (no HOME)".into(), |f| f
                        .display()
                        .to_string()),
            )),
            None => Ok(None),
        };
    }
    let mut profile = Profile {
        name,
        keys_file: None,
        access_key_id: None,
        secret_access_key: None,
        session_token: None,
        region: None,
        endpoint_url: None,
        settings_file: None,
        other_sources: Vec::new(),
    };
    for (file, values) in found {
        for (key, value) in values {
            let slot = match key.as_str() {
                "aws_access_key_id" => {
                    profile.keys_file = Some(file.clone());
                    &mut profile.access_key_id
                }
                "aws_secret_access_key" => &mut profile.secret_access_key,
                "aws_session_token" => &mut profile.session_token,
                "region" => {
                    profile.settings_file = Some(file.clone());
                    &mut profile.region
                }
                "endpoint_url" => {
                    profile.settings_file = Some(file.clone());
                    &mut profile.endpoint_url
                }
                other => {
                    if OTHER_SOURCES.contains(&other) && !profile.other_sources.contains(&key) {
                        profile.other_sources.push(key.clone());
                    }
                    continue;
                }
            };
            *slot = Some(value);
        }
    }
    Ok(Some(profile))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn a_profile_merges_both_files_the_credentials_file_winning() {
        let dir = tempfile::tempdir().unwrap();
        let aws = dir.path().join(".aws");
        std::fs::create_dir(&aws).unwrap();
        std::fs::write(
            aws.join("config"),
            "# comment\n[default]\nregion = eu-west-1\n\n[profile dev]\nregion = us-west-2\n\
             endpoint_url = http://127.0.0.1:9000\ns3 =\n  max_concurrent_requests = 20\n\
             aws_access_key_id = FROM-CONFIG\naws_secret_access_key = config-secret\n",
        )
        .unwrap();
        std::fs::write(
            aws.join("credentials"),
            "[default]\naws_access_key_id = DEFAULT-ID\naws_secret_access_key = default-secret\n\
             [dev]\naws_access_key_id = DEV-ID\naws_secret_access_key = dev-secret\n\
             aws_session_token = dev-token\n",
        )
        .unwrap();
        let home = dir.path().display().to_string();
        let p = load(&env_of(&[("HOME", home.clone())])).unwrap().unwrap();
        assert_eq!(p.name, "default");
        assert_eq!(p.region.as_deref(), Some("eu-west-1"));
        assert_eq!(p.keys().unwrap(), Some(("DEFAULT-ID", "default-secret")));
        let p = load(&env_of(&[
            ("HOME", home.clone()),
            ("AWS_PROFILE", "dev".into()),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(p.keys().unwrap(), Some(("DEV-ID", "dev-secret")));
        assert_eq!(p.session_token.as_deref(), Some("dev-token"));
        assert_eq!(p.region.as_deref(), Some("us-west-2"));
        assert_eq!(p.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(p.keys_file, Some(aws.join("credentials")));
        assert_eq!(p.settings_file, Some(aws.join("config")));
    }

    #[test]
    fn files_named_by_the_environment_and_a_missing_profile_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("creds.ini");
        std::fs::write(
            &creds,
            "[ci]\naws_access_key_id = CI-ID\n[roles]\nrole_arn = arn:aws:iam::1:role/x\n",
        )
        .unwrap();
        let env = |profile: &str| {
            env_of(&[
                ("HOME", "/nonexistent-home".into()),
                ("AWS_SHARED_CREDENTIALS_FILE", creds.display().to_string()),
                ("AWS_PROFILE", profile.into()),
            ])
        };
        let p = load(&env("ci")).unwrap().unwrap();
        let err = p.keys().unwrap_err();
        assert!(
            err.contains("'ci'")
                && err.contains("creds.ini")
                && err.contains("not aws_secret_access_key")
                && !err.contains("CI-ID"),
            "{err}"
        );
        let p = load(&env("roles")).unwrap().unwrap();
        assert_eq!(p.keys().unwrap(), None);
        assert_eq!(p.other_sources, vec!["role_arn".to_string()]);
        let err = load(&env("absent")).unwrap_err();
        assert!(
            err.contains("'absent' (AWS_PROFILE)") && err.contains("creds.ini"),
            "{err}"
        );
        // No profile named and no files: nothing, no error.
        assert_eq!(
            load(&env_of(&[("HOME", "/nonexistent-home".into())])).unwrap(),
            None
        );
    }

    #[test]
    fn a_malformed_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(&config, "[default\nregion = x\n").unwrap();
        let err = load(&env_of(&[(
            "AWS_CONFIG_FILE",
            config.display().to_string(),
        )]))
        .unwrap_err();
        assert!(
            err.contains("cannot parse") && err.contains("config"),
            "{err}"
        );
    }
}
