//! A replicated cell's settings through the real binary (issue 33):
//! `--node-id`, `--cell` and `--cell-secret-file` as flags,
//! `RINGSTREAM_*` variables and TOML keys; `--check-config` prints a valid
//! cell (never the secret) and refuses each kind of mistake with exit 78
//! naming the setting; `--help` explains them; a start with `--cell` and
//! incomplete tier settings is refused (exit 78) before it touches
//! anything; without them nothing changes. The rules themselves are unit-tested in src/cell/config.rs and
//! src/cli.rs.

mod common;

use common::{Server, TempDir, START_TIMEOUT};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// sysexits.h EX_CONFIG: what the server exits with for a configuration error.
const EX_CONFIG: i32 = 78;

const SECRET: &str = "a-secret-of-twenty-nine-bytes";
const THREE: &str = "1@127.0.0.1:7001,2@127.0.0.2:7001,3@127.0.0.3:7001";

/// A secret file with `text` and `mode` under `root`.
fn secret_file(root: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = root.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs the binary with exactly these arguments and environment (inherited
/// RINGSTREAM_* and RUST_LOG removed) until it exits: (status, stdout,
/// stderr). One still running after START_TIMEOUT (it served) is killed
/// and the test fails.
fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(common::server_binary());
    for (k, _) in std::env::vars() {
        if k.starts_with("RINGSTREAM_") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning ringstream");
    let deadline = Instant::now() + START_TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{args:?}: still running after {START_TIMEOUT:?}: {}", String::from_utf8_lossy(&out.stdout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

/// `--check-config` on a data directory under `root` that does not exist,
/// two shards, with these extra arguments and environment.
fn check_config(root: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let data = root.join("data");
    let base = ["--check-config", "--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "2", "--no-pin"];
    let out = run(&[&base[..], args].concat(), env);
    assert!(!data.exists(), "--check-config created the data directory");
    assert!(!out.1.contains(SECRET) && !out.2.contains(SECRET), "the secret was printed:\n{}{}", out.1, out.2);
    out
}

#[test]
fn check_config_prints_a_valid_cell_and_passes() {
    let root = TempDir::new("cell-check");
    let secret = secret_file(root.path(), "secret", &format!("{SECRET}\n"), 0o600);
    let args = ["--node-id", "2", "--cell", THREE, "--cell-secret-file", s(&secret)];
    let (code, out, err) = check_config(root.path(), &args, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("cell             node 2 of 3 voters"), "{out}");
    assert!(out.contains("voter 1          127.0.0.1:7001, groups 0-1 on ports 7001-7002\n"), "{out}");
    assert!(out.contains("voter 2          127.0.0.2:7001, groups 0-1 on ports 7001-7002, this node"), "{out}");
    assert!(out.contains("voter 3          127.0.0.3:7001, groups 0-1 on ports 7001-7002\n"), "{out}");
    assert!(out.contains(&format!("cell secret      {}: read, 29 bytes", secret.display())), "{out}");
    // Two shards a node: two groups, nothing refused.
    assert!(!out.contains("WARNING") && out.ends_with("configuration ok\n"), "{out}");
    assert!(out.contains("cell             any node takes any request"), "{out}");

    // Five voters, one of them by name; the last port of the last group is 65535.
    let five = "1@127.0.0.1:1,2@localhost:2,3@127.0.0.3:3,4@127.0.0.4:4,5@127.0.0.5:65534";
    let (code, out, err) =
        check_config(root.path(), &["--node-id", "5", "--cell", five, "--cell-secret-file", s(&secret)], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("node 5 of 5 voters") && out.contains("on ports 65534-65535, this node"), "{out}");
}

#[test]
fn cell_settings_come_from_the_environment_and_the_file() {
    let root = TempDir::new("cell-sources");
    let secret = secret_file(root.path(), "secret", SECRET, 0o400);
    let env = [("RINGSTREAM_NODE_ID", "3"), ("RINGSTREAM_CELL", THREE), ("RINGSTREAM_CELL_SECRET_FILE", s(&secret))];
    let (code, out, err) = check_config(root.path(), &[], &env);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("node 3 of 3 voters") && out.contains("127.0.0.3:7001, groups 0-1 on ports 7001-7002, this node"),
        "{out}"
    );

    let file = root.path().join("ringstream.toml");
    let toml = format!("node-id = 1\ncell = \"{THREE}\"\ncell-secret-file = \"{}\"\n", secret.display());
    std::fs::write(&file, toml).unwrap();
    let (code, out, err) = check_config(root.path(), &["--config", s(&file)], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("node 1 of 3 voters"), "{out}");

    // The environment beats the file, a flag beats both.
    let (code, out, err) = check_config(root.path(), &["--config", s(&file)], &[("RINGSTREAM_NODE_ID", "2")]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("node 2 of 3 voters"), "{out}");
    let (code, out, err) =
        check_config(root.path(), &["--config", s(&file), "--node-id", "3"], &[("RINGSTREAM_NODE_ID", "2")]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("node 3 of 3 voters"), "{out}");

    // A mistake in the file names the key and the file.
    std::fs::write(&file, format!("node-id = 4\ncell = \"{THREE}\"\ncell-secret-file = \"{}\"\n", secret.display()))
        .unwrap();
    let (code, _, err) = check_config(root.path(), &["--config", s(&file)], &[]);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(err.contains("--node-id 4 is not one of the cell's voters") && err.contains("`node-id` in"), "{err}");
}

#[test]
fn each_bad_cell_setting_exits_78_naming_it() {
    let root = TempDir::new("cell-bad");
    let good = secret_file(root.path(), "good", SECRET, 0o600);
    let open = secret_file(root.path(), "open", SECRET, 0o644);
    let short = secret_file(root.path(), "short", "fifteen-bytes!!\n", 0o600);
    let (g, o, sh) = (s(&good), s(&open), s(&short));
    let high = "1@127.0.0.1:7001,2@127.0.0.2:65535,3@127.0.0.3:7001";
    let cases: [(&str, Vec<&str>, &str); 9] = [
        ("no --node-id", vec!["--cell", THREE, "--cell-secret-file", g], "--cell needs --node-id"),
        ("no --cell", vec!["--node-id", "1", "--cell-secret-file", g], "needs --cell ("),
        ("no secret file", vec!["--node-id", "1", "--cell", THREE], "--cell needs --cell-secret-file"),
        ("not a voter", vec!["--node-id", "4", "--cell", THREE, "--cell-secret-file", g], "--node-id 4 is not one"),
        (
            "bad voter syntax",
            vec![
                "--node-id",
                "1",
                "--cell",
                "1@127.0.0.1:7001,2=127.0.0.2:7001,3@127.0.0.3:7001",
                "--cell-secret-file",
                g,
            ],
            "--cell entry \"2=127.0.0.2:7001\": expected ID@HOST:PORT",
        ),
        (
            "two voters",
            vec!["--node-id", "1", "--cell", "1@127.0.0.1:1,2@127.0.0.1:2", "--cell-secret-file", g],
            "--cell names 2 voters",
        ),
        ("world-readable secret", vec!["--node-id", "1", "--cell", THREE, "--cell-secret-file", o], "mode 644"),
        ("short secret", vec!["--node-id", "1", "--cell", THREE, "--cell-secret-file", sh], "the secret has 15 bytes"),
        ("port overflow", vec!["--node-id", "1", "--cell", high, "--cell-secret-file", g], "with --shards 2"),
    ];
    for (what, args, want) in cases {
        let (code, out, err) = check_config(root.path(), &args, &[]);
        assert_eq!(code, Some(EX_CONFIG), "{what}: {out}{err}");
        assert!(err.starts_with("ringstream: configuration error: --"), "{what}: {err}");
        assert!(err.contains(want), "{what}: wanted {want:?} in {err}");
    }
    let (_, _, err) = check_config(root.path(), &["--node-id", "1", "--cell", THREE, "--cell-secret-file", o], &[]);
    assert!(err.contains(&format!("--cell-secret-file {o}")) && err.contains("chmod 600"), "{err}");
    let (_, _, err) = check_config(root.path(), &["--node-id", "1", "--cell", high, "--cell-secret-file", g], &[]);
    assert!(err.contains("--cell entry 2@127.0.0.2:65535") && err.contains("65536"), "{err}");
}

#[test]
fn help_explains_the_cell_settings() {
    let (code, out, err) = run(&["--help"], &[]);
    assert_eq!(code, Some(0), "{err}");
    for want in [
        "--node-id <N>",
        "--cell <ID@HOST:PORT,...>",
        "--cell-secret-file <PATH>",
        "RINGSTREAM_NODE_ID",
        "RINGSTREAM_CELL=",
        "RINGSTREAM_CELL_SECRET_FILE",
        "3, 5 or 7",
        "PORT + i",
        "durable (O_DIRECT|O_DSYNC, or fdatasync) on a majority",
        "chmod 600",
    ] {
        assert!(out.contains(want), "--help lacks {want:?}:\n{out}");
    }
}

#[test]
fn a_cell_with_incomplete_tier_settings_is_refused_and_without_one_nothing_changes() {
    let root = TempDir::new("cell-serve");
    let secret = secret_file(root.path(), "secret", SECRET, 0o600);
    let data = root.path().join("data");
    let cell = ["--node-id", "1", "--cell", THREE, "--cell-secret-file", s(&secret)];
    let one = ["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "1", "--no-pin"];
    let tier = ["--tier", "s3"];
    let (code, out, err) = run(&[&one[..], &cell, &tier].concat(), &[]);
    assert_eq!(code, Some(EX_CONFIG), "{out}{err}");
    assert!(err.contains("--tier s3 needs --tier-endpoint"), "{err}");
    assert!(out.is_empty() && !data.exists(), "a refused start touched nothing: {out}");

    let (code, out, err) = check_config(root.path(), &[], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let cell_lines = out.lines().filter(|l| l.starts_with("cell") || l.starts_with("voter"));
    assert_eq!(cell_lines.count(), 0, "a single node's report names no cell: {out}");
    let mut server = Server::start();
    assert_eq!(server.conn().request("PUT", "/v1/stream/single", &[], b"").status, 201);
    server.kill9();
}

/// `--restore-from-tier` refuses what it cannot restore into or from, with
/// exit 78 and the reason, and touches nothing: no cell, no tier, a data
/// directory that is not empty. (The restore itself runs against a real
/// object store in scripts/cell-tiering.sh.)
#[test]
fn a_restore_from_the_tier_is_refused_without_a_cell_a_tier_or_an_empty_directory() {
    let root = TempDir::new("cell-restore");
    let secret = secret_file(root.path(), "secret", SECRET, 0o600);
    let data = root.path().join("data");
    let cell = ["--node-id", "1", "--cell", THREE, "--cell-secret-file", s(&secret)];
    let base = ["--restore-from-tier", "--data-dir", s(&data), "--shards", "1", "--no-pin"];
    let tier =
        ["--tier", "s3", "--tier-endpoint", "http://127.0.0.1:9", "--tier-bucket", "b", "--hot-bytes", "201326592"];
    let keys = [("AWS_ACCESS_KEY_ID", "id"), ("AWS_SECRET_ACCESS_KEY", "secret")];
    let (code, _, err) = run(&[&base[..], &tier].concat(), &keys);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(err.contains("--restore-from-tier needs --cell"), "{err}");
    let (code, _, err) = run(&[&base[..], &cell].concat(), &keys);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(err.contains("--restore-from-tier needs --tier s3"), "{err}");
    assert!(!data.exists(), "a refused restore touched nothing");
    std::fs::create_dir_all(data.join("shard-0")).unwrap();
    let (code, _, err) = run(&[&base[..], &cell, &tier].concat(), &keys);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(err.contains("is not empty"), "{err}");
    let (code, out, _) = run(&["--help"], &[]);
    assert_eq!(code, Some(0));
    assert!(out.contains("--restore-from-tier"), "--help names it");
}
