//! Child processes for tests: a clean environment, output with a time limit (a hang fails the
//! test instead of stalling the run), text of the output, and re-running one test of the
//! current test binary in a child (for settings read once per process, or a fresh emulator).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Prefixes of the variables that steer h5gds, HDF5, the emulator and cuFile. Children start
/// without them, so that a test sees only what it sets.
pub const CONTROLLED_PREFIXES: [&str; 4] = ["HDF5_", "H5GDS_", "H5_GDS_", "CUFILE_"];

/// Removes every variable starting with one of `prefixes` from `cmd`'s environment.
pub fn remove_env<'a>(cmd: &'a mut Command, prefixes: &[&str]) -> &'a mut Command {
    for (key, _) in std::env::vars_os() {
        if prefixes
            .iter()
            .any(|prefix| key.to_string_lossy().starts_with(prefix))
        {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Removes the variables of [`CONTROLLED_PREFIXES`] from `cmd`'s environment.
pub fn clean_env(cmd: &mut Command) -> &mut Command {
    remove_env(cmd, &CONTROLLED_PREFIXES)
}

/// How long a child may run before the test fails: far above any test's needs.
pub const TIME_LIMIT: Duration = Duration::from_secs(600);

/// Runs `cmd` to completion with its output captured and stdin closed; kills it and panics if
/// it runs longer than `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    // Drain the pipes on threads, so a child writing much output never blocks on them.
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).map(|_| bytes)
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut bytes).map(|_| bytes)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader").unwrap_or_default(),
        stderr: err.join().expect("stderr reader").unwrap_or_default(),
    }
}

/// The child exited 0 and printed `expected`; else fails showing its status and output.
#[track_caller]
pub fn assert_ok(out: &Output, expected: &str) {
    assert!(
        out.status.success() && text(&out.stdout).contains(expected),
        "expected {expected}; status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Bytes of program output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The output of a child as text.
pub trait OutputText {
    fn stdout_text(&self) -> String;
    fn stderr_text(&self) -> String;
}

impl OutputText for Output {
    fn stdout_text(&self) -> String {
        text(&self.stdout)
    }
    fn stderr_text(&self) -> String {
        text(&self.stderr)
    }
}

/// The variable naming the test a child process runs (see [`in_child`]).
pub const CHILD_VAR: &str = "H5GDS_TEST_CHILD";

/// Whether this process is the child running test `name`.
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD_VAR).as_deref() == Ok(name)
}

/// Whether this process is a child running any test.
pub fn is_any_child() -> bool {
    std::env::var_os(CHILD_VAR).is_some()
}

/// Runs test `name` of this test binary again in a child process (only that test, output
/// shown). In the child, runs `body` and returns `None`. In the parent, lets `configure` set
/// up the child's command (its environment), runs it, checks that it passed, and returns its
/// output.
pub fn in_child(
    name: &str,
    configure: impl FnOnce(&mut Command),
    body: impl FnOnce(),
) -> Option<Output> {
    if is_child(name) {
        body();
        println!("CHILD PASSED {name}");
        return None;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        name,
        "--nocapture",
        "--test-threads=1",
        "--include-ignored",
    ]);
    configure(&mut cmd);
    cmd.env(CHILD_VAR, name);
    let out = output_within(&mut cmd, TIME_LIMIT);
    assert!(
        out.status.success() && out.stdout_text().contains(&format!("CHILD PASSED {name}")),
        "child {name} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        out.stdout_text(),
        out.stderr_text()
    );
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_within_captures_both_streams_and_the_status() {
        let out = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout_text(), "out\n");
        assert_eq!(out.stderr_text(), "err\n");
    }

    #[test]
    #[should_panic(expected = "did not finish within")]
    fn output_within_kills_a_child_that_hangs() {
        output_within(Command::new("sleep").arg("30"), Duration::from_millis(200));
    }

    #[test]
    fn clean_env_removes_only_the_controlled_variables() {
        // Names no other test uses.
        std::env::set_var("H5GDS_SUPPORT_TEST_VAR", "1");
        std::env::set_var("SUPPORT_TEST_KEEP", "1");
        let mut cmd = Command::new("env");
        clean_env(&mut cmd);
        let out = output_within(&mut cmd, Duration::from_secs(30)).stdout_text();
        assert!(!out.contains("H5GDS_SUPPORT_TEST_VAR="), "{out}");
        assert!(out.contains("SUPPORT_TEST_KEEP=1"), "{out}");
    }
}
