//! Operations, through the real binary: where settings come from (flag >
//! environment > config file > default), that bad settings fail at startup
//! naming the setting, the startup checks (data-directory lock, shard count,
//! O_DIRECT), the log level and format, and that docs/operations.md lists
//! every setting. The io_uring, RLIMIT_MEMLOCK and O_DIRECT checks are
//! provoked for real in the child before it execs the server: a seccomp
//! filter that refuses `io_uring_setup` (as container runtimes' default
//! profiles do) or O_DIRECT opens (as some file systems do), a lowered
//! locked-memory limit, CAP_IPC_LOCK dropped. Every branch of the decision
//! functions is also unit-tested in src/preflight.rs.

mod common;

use clap::CommandFactory;
use common::{Conn, TempDir, START_TIMEOUT};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How a start ended: listening (the child still runs), or exited.
enum Start {
    Listening { child: Child, line: String, port: u16, stderr: std::path::PathBuf },
    Exited { code: Option<i32>, stderr: String },
}

impl Start {
    fn listening(self, what: &str) -> Listening {
        match self {
            Start::Listening { child, line, port, stderr } => Listening { child, line, port, stderr },
            Start::Exited { code, stderr } => {
                panic!("{what}: server exited ({code:?}) instead of listening:\n{stderr}")
            }
        }
    }
    /// The exit's stderr; panics when the server started.
    fn failed(self, what: &str) -> String {
        match self {
            Start::Exited { code, stderr } => {
                assert_ne!(code, Some(0), "{what}: exit status 0 for a failed start:\n{stderr}");
                assert!(code.is_some(), "{what}: killed by a signal:\n{stderr}");
                stderr
            }
            Start::Listening { line, .. } => panic!("{what}: expected a startup failure, but: {line}"),
        }
    }
    /// [`Start::failed`] with this exit status (78: a configuration error).
    fn failed_with(self, what: &str, want: i32) -> String {
        match self {
            Start::Exited { code, stderr } => {
                assert_eq!(code, Some(want), "{what}: exit status:\n{stderr}");
                stderr
            }
            Start::Listening { line, .. } => panic!("{what}: expected a startup failure, but: {line}"),
        }
    }
}

/// sysexits.h EX_CONFIG: what the server exits with for a configuration error.
const EX_CONFIG: i32 = 78;

struct Listening {
    child: Child,
    line: String,
    port: u16,
    stderr: std::path::PathBuf,
}

impl Listening {
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
    /// SIGKILL and reap.
    fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the server with exactly these arguments and environment (every
/// inherited RINGSTREAM_* and RUST_LOG variable removed), and waits for the
/// listening line or the exit.
fn start(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Start {
    start_with(root, args, env, None)
}

/// [`start`], running `before_exec` in the child between fork and exec (to
/// install a seccomp filter, lower a limit, drop a capability).
fn start_with(
    root: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    before_exec: Option<fn() -> std::io::Result<()>>,
) -> Start {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let stderr_path = root.join(format!("stderr-{n}.log"));
    let mut cmd = Command::new(common::server_binary());
    for (k, _) in std::env::vars() {
        if k.starts_with("RINGSTREAM_") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    if let Some(f) = before_exec {
        use std::os::unix::process::CommandExt;
        // Safety: the hooks only make raw syscalls (prctl, setrlimit,
        // capget/capset); they neither allocate nor take locks.
        unsafe { cmd.pre_exec(f) };
    }
    let mut child = cmd.spawn().expect("spawning ringstream");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(20)) {
            if let Some(port) = parse_port(&line) {
                return Start::Listening { child, line, port, stderr: stderr_path };
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            return Start::Exited {
                code: status.code(),
                stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
            };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "no listening line or exit within {START_TIMEOUT:?}; stderr:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
    }
}

fn parse_port(line: &str) -> Option<u16> {
    let rest = line.strip_prefix("ringstream listening on http://")?;
    rest.split_whitespace().next()?.rsplit_once(':')?.1.parse().ok()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn settings_come_from_file_then_env_then_flags() {
    let root = TempDir::new("ops-prec");
    let file = root.path().join("ringstream.toml");
    let (a, b, c) = (root.path().join("a"), root.path().join("b"), root.path().join("c"));
    std::fs::write(
        &file,
        format!("listen = \"127.0.0.1:0\"\ndata-dir = \"{}\"\nshards = 1\nno-pin = true\n", a.display()),
    )
    .unwrap();

    // The file alone.
    let srv = start(root.path(), &["--config", s(&file)], &[]).listening("file only");
    assert!(srv.line.contains(&format!("(1 shards, data in {})", a.display())), "{}", srv.line);
    let r = Conn::connect(srv.port).request("GET", "/v1/stream/none", &[], b"");
    assert_eq!(r.status, 404, "a server started from the file serves: {}", r.summary());
    srv.kill();

    // The environment beats the file (the file is named by the environment too).
    let env = [("RINGSTREAM_CONFIG", s(&file)), ("RINGSTREAM_SHARDS", "2"), ("RINGSTREAM_DATA_DIR", s(&b))];
    let srv = start(root.path(), &[], &env).listening("env over file");
    assert!(srv.line.contains(&format!("(2 shards, data in {})", b.display())), "{}", srv.line);
    srv.kill();

    // Flags beat both.
    let srv = start(root.path(), &["--shards", "3", "--data-dir", s(&c)], &env).listening("flags over env");
    assert!(srv.line.contains(&format!("(3 shards, data in {})", c.display())), "{}", srv.line);
    srv.kill();
}

#[test]
fn an_unknown_key_in_the_file_fails_naming_the_key() {
    let root = TempDir::new("ops-unknown");
    let file = root.path().join("bad.toml");
    std::fs::write(&file, "shards = 1\nsegment_size = 65536\n").unwrap();
    let data = root.path().join("data");
    let err =
        start(root.path(), &["--config", s(&file), "--data-dir", s(&data)], &[]).failed_with("unknown key", EX_CONFIG);
    assert!(err.contains("unknown field `segment_size`"), "{err}");
    assert!(err.contains(s(&file)), "the message names the file: {err}");
    assert!(!data.exists(), "nothing was created before the settings were checked");
}

#[test]
fn invalid_values_name_the_setting_and_where_it_came_from() {
    let root = TempDir::new("ops-invalid");
    let data = root.path().join("data");
    let d = ["--data-dir", s(&data)];

    let err = start(root.path(), &d, &[("RINGSTREAM_SEGMENT_BYTES", "1000")]).failed_with("segment bytes", EX_CONFIG);
    assert!(err.contains("--segment-bytes must be") && err.contains("RINGSTREAM_SEGMENT_BYTES"), "{err}");

    let file = root.path().join("f.toml");
    std::fs::write(&file, "direct-io = \"sometimes\"\n").unwrap();
    let err = start(root.path(), &["--config", s(&file), d[0], d[1]], &[]).failed_with("direct-io in file", EX_CONFIG);
    assert!(err.contains("--direct-io") && err.contains("\"sometimes\"") && err.contains("`direct-io` in"), "{err}");

    let err = start(root.path(), &["--log-level", "verbose", d[0], d[1]], &[]).failed_with("log level", EX_CONFIG);
    assert!(err.contains("--log-level") && err.contains("verbose"), "{err}");

    let err = start(root.path(), &["--shards", "0", d[0], d[1]], &[]).failed_with("shards", EX_CONFIG);
    assert!(err.contains("--shards must be between 1 and"), "{err}");

    // Malformed on the command line: clap's own message, naming the flag.
    let err = start(root.path(), &["--listen", "localhost", d[0], d[1]], &[]).failed_with("listen", EX_CONFIG);
    assert!(err.contains("--listen"), "{err}");
}

#[test]
fn a_second_server_on_the_same_dir_fails_at_once_then_the_shard_count_is_checked() {
    let root = TempDir::new("ops-lock");
    let data = root.path().join("data");
    let args = ["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "2", "--no-pin"];
    let first = start(root.path(), &args, &[]).listening("first server");

    let t = Instant::now();
    // In use: perhaps free on the next try, so not a configuration error.
    let err = start(root.path(), &args, &[]).failed_with("second server", 1);
    assert!(err.contains(&format!("data directory {} is in use", data.display())), "{err}");
    assert!(err.contains(&format!("pid {}", first.pid())), "the message names the holder: {err}");
    assert!(t.elapsed() < Duration::from_secs(10), "the second server must fail at once, took {:?}", t.elapsed());
    // The first server is unharmed.
    let r = Conn::connect(first.port).request("PUT", "/v1/stream/still-here", &[], b"");
    assert_eq!(r.status, 201, "{}", r.summary());

    // SIGKILL releases the lock (the kernel drops it with the process).
    first.kill();
    let err = start(root.path(), &["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "1"], &[])
        .failed_with("another shard count", EX_CONFIG);
    assert!(err.contains("was written by 2 shards") && err.contains("this server has 1"), "{err}");
    assert!(err.contains("start with --shards 2"), "the message says what to do: {err}");

    let again = start(root.path(), &args, &[]).listening("same shard count again");
    let r = Conn::connect(again.port).request("HEAD", "/v1/stream/still-here", &[], b"");
    assert_eq!(r.status, 200, "{}", r.summary());
}

/// `--check-config` with these arguments: (exit status, stdout, stderr).
fn check_config(args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(common::server_binary());
    for (k, _) in std::env::vars() {
        if k.starts_with("RINGSTREAM_") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    let out = cmd.arg("--check-config").args(args).stdin(Stdio::null()).output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

#[test]
fn check_config_validates_without_serving() {
    let root = TempDir::new("ops-check");
    let data = root.path().join("data");
    let args = ["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "2", "--no-pin"];

    // A data directory that does not exist yet: fine, and still not created.
    let (code, out, err) = check_config(&args);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("does not exist; a start creates it") && out.contains("configuration ok"), "{out}");
    assert!(!data.exists(), "--check-config created the data directory");
    assert!(out.contains("producers        at most 4096 per stream (a state record of up to"), "{out}");
    assert!(out.contains("one idle for more than 604800 s"), "{out}");

    // A directory written by a server: format and shard count agree.
    let server = start(root.path(), &args, &[]).listening("server");
    let (code, _, err) = check_config(&args);
    assert_eq!(code, Some(EX_CONFIG), "a directory in use fails the check: {err}");
    assert!(
        err.contains("is in use by another ringstream process") && err.contains(&server.pid().to_string()),
        "{err}"
    );
    // The check did not get in the way of the running server.
    assert_eq!(Conn::connect(server.port).request("GET", "/readyz", &[], b"").status, 200);
    server.kill();
    let (code, out, err) = check_config(&args);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("(format=2, shards=2, not in use)") && out.contains("direct I/O"), "{out}");

    // Another shard count, a bad value, an unknown key: 78 with the reason.
    let (code, _, err) = check_config(&["--data-dir", s(&data), "--shards", "3"]);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(err.contains("was written by 2 shards") && err.contains("this server has 3"), "{err}");
    let (code, _, err) = check_config(&["--data-dir", s(&data), "--segment-bytes", "12"]);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(err.contains("--segment-bytes must be a multiple of 4096"), "{err}");
    let small = ["--data-dir", s(&data), "--segment-bytes", "65536", "--max-producers-per-stream", "4096"];
    let (code, _, err) = check_config(&small);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(
        err.contains("--max-producers-per-stream 4096") && err.contains("does not fit --segment-bytes 65536"),
        "{err}"
    );
    let file = root.path().join("typo.toml");
    std::fs::write(&file, "shard = 2\n").unwrap();
    let (code, _, err) = check_config(&["--config", s(&file), "--data-dir", s(&data)]);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(err.contains("unknown field `shard`"), "{err}");
    // Under a regular file (root could create it anywhere else).
    let not_dir = root.path().join("a-file");
    std::fs::write(&not_dir, "").unwrap();
    let (code, _, err) = check_config(&["--data-dir", s(&not_dir.join("data"))]);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(err.contains("cannot be created"), "{err}");
    // Nothing above wrote the meta file anew or served.
    assert_eq!(std::fs::read_to_string(data.join("ringstream.meta")).unwrap(), "format=2\nshards=2\n");
}

#[test]
fn version_names_the_commit() {
    let out = Command::new(common::server_binary()).arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let commit = text.split("commit ").nth(1).and_then(|r| r.split(',').next()).unwrap_or_default();
    assert!(text.starts_with(&format!("ringstream {} (commit ", env!("CARGO_PKG_VERSION"))), "{text}");
    // A hex commit in a git checkout; `unknown` from a tarball.
    assert!(commit == "unknown" || (commit.len() >= 7 && commit.bytes().all(|b| b.is_ascii_hexdigit())), "{text}");
}

#[test]
fn a_data_dir_of_another_storage_format_is_refused_untouched() {
    let root = TempDir::new("ops-format");
    let data = root.path().join("data");
    std::fs::create_dir_all(data.join("shard-0")).unwrap();
    // Format 1 (before segment seals): its older segments would not verify.
    std::fs::write(data.join("ringstream.meta"), "format=1\nshards=1\n").unwrap();
    std::fs::write(data.join("shard-0").join("0000000000000000.seg"), vec![0u8; 4096]).unwrap();
    let args = ["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "1", "--no-pin"];
    let err = start(root.path(), &args, &[]).failed_with("format 1 directory", EX_CONFIG);
    assert!(err.contains("format=1") && err.contains("this version reads format=2"), "{err}");
    assert!(err.contains("run the version that wrote it"), "{err}");
    assert_eq!(std::fs::read_to_string(data.join("ringstream.meta")).unwrap(), "format=1\nshards=1\n");
    assert_eq!(std::fs::read_dir(data.join("shard-0")).unwrap().count(), 1, "the segment is left alone");
}

#[test]
fn direct_io_required_on_tmpfs_fails_clearly_or_really_uses_o_direct() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm; skipped");
        return;
    }
    let root = TempDir::new("ops-dio");
    let data = shm.join(format!("ringstream-ops-dio-{}", std::process::id()));
    let args =
        ["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "1", "--no-pin", "--direct-io", "required"];
    let outcome = start(root.path(), &args, &[]);
    // tmpfs refuses O_DIRECT before Linux 6.6 and accepts it since.
    match outcome {
        Start::Exited { .. } => {
            let err = outcome.failed("direct-io required on tmpfs");
            assert!(err.contains("--direct-io required") && err.contains(s(&data)), "{err}");
        }
        Start::Listening { .. } => {
            let srv = outcome.listening("direct-io required on tmpfs");
            std::thread::sleep(Duration::from_millis(100));
            let log = srv.kill();
            assert!(log.contains("direct I/O: on (O_DIRECT)"), "required must mean on when it starts:\n{log}");
        }
    }
    let _ = std::fs::remove_dir_all(&data);
}

/// Seccomp filters for the startup-check tests, as classic BPF over
/// `struct seccomp_data` (nr at offset 0, arch at 4, args from 16).
mod seccomp {
    #[repr(C)]
    struct SockFilter {
        code: u16,
        jt: u8,
        jf: u8,
        k: u32,
    }
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const SockFilter,
    }
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xc000_003e; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xc000_00b7; // AUDIT_ARCH_AARCH64

    fn op(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
        SockFilter { code, jt, jf, k }
    }

    fn install(prog: &[SockFilter]) -> std::io::Result<()> {
        let fprog = SockFprog { len: prog.len() as u16, filter: prog.as_ptr() };
        // Safety: plain prctl calls; the kernel copies the program.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, &fprog as *const SockFprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// `io_uring_setup` fails with `errno`; everything else is allowed.
    fn refuse_io_uring(errno: i32) -> std::io::Result<()> {
        install(&[
            op(LD_W_ABS, 0, 0, 4),
            op(JEQ_K, 0, 3, ARCH),
            op(LD_W_ABS, 0, 0, 0),
            op(JEQ_K, 0, 1, libc::SYS_io_uring_setup as u32),
            op(RET_K, 0, 0, RET_ERRNO | errno as u32),
            op(RET_K, 0, 0, RET_ALLOW),
        ])
    }
    pub fn io_uring_eperm() -> std::io::Result<()> {
        refuse_io_uring(libc::EPERM)
    }
    pub fn io_uring_enosys() -> std::io::Result<()> {
        refuse_io_uring(libc::ENOSYS)
    }

    /// `openat` with O_DIRECT fails with EINVAL, as on a file system
    /// without direct I/O; other opens are allowed.
    pub fn no_o_direct() -> std::io::Result<()> {
        install(&[
            op(LD_W_ABS, 0, 0, 4),
            op(JEQ_K, 0, 5, ARCH),
            op(LD_W_ABS, 0, 0, 0),
            op(JEQ_K, 0, 3, libc::SYS_openat as u32),
            op(LD_W_ABS, 0, 0, 16 + 2 * 8), // args[2] (flags), low word
            op(JSET_K, 0, 1, libc::O_DIRECT as u32),
            op(RET_K, 0, 0, RET_ERRNO | libc::EINVAL as u32),
            op(RET_K, 0, 0, RET_ALLOW),
        ])
    }
}

fn memlock_64k() -> std::io::Result<()> {
    let lim = libc::rlimit { rlim_cur: 64 * 1024, rlim_max: 64 * 1024 };
    // Safety: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Drops CAP_IPC_LOCK for good (bounding set, inheritable and ambient sets,
/// so that exec as root does not grant it back), then limits locked memory
/// to 1 MiB: above glommio's floor, below what registered buffers need.
fn memlock_1m_without_cap_ipc_lock() -> std::io::Result<()> {
    const CAP_IPC_LOCK: u32 = 14;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // Safety: raw prctl/capget/capset/setrlimit with structs of the sizes
    // the kernel expects for _LINUX_CAPABILITY_VERSION_3 (two Data words).
    unsafe {
        // Fails without CAP_SETPCAP, when the capability is not ours anyway.
        libc::prctl(libc::PR_CAPBSET_DROP, CAP_IPC_LOCK as libc::c_ulong, 0, 0, 0);
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0);
        let mut hdr = Header { version: 0x2008_0522, pid: 0 };
        let mut data = [Data::default(); 2];
        if libc::syscall(libc::SYS_capget, &mut hdr as *mut Header, data.as_mut_ptr()) == 0 {
            data[0].inheritable &= !(1 << CAP_IPC_LOCK);
            data[0].effective &= !(1 << CAP_IPC_LOCK);
            data[0].permitted &= !(1 << CAP_IPC_LOCK);
            libc::syscall(libc::SYS_capset, &mut hdr as *mut Header, data.as_ptr());
        }
        let lim = libc::rlimit { rlim_cur: 1 << 20, rlim_max: 1 << 20 };
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[test]
fn io_uring_refused_by_seccomp_fails_saying_what_to_allow() {
    let root = TempDir::new("ops-uring");
    let data = root.path().join("data");
    let args = ["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "1", "--no-pin"];
    let err =
        start_with(root.path(), &args, &[], Some(seccomp::io_uring_eperm)).failed_with("io_uring EPERM", EX_CONFIG);
    assert!(err.contains("io_uring is unavailable (io_uring_setup: Operation not permitted"), "{err}");
    assert!(err.contains("seccomp") && err.contains("io_uring_setup, io_uring_enter and io_uring_register"), "{err}");
    let err =
        start_with(root.path(), &args, &[], Some(seccomp::io_uring_enosys)).failed_with("io_uring ENOSYS", EX_CONFIG);
    assert!(err.contains("io_uring is unavailable (io_uring_setup: Function not implemented"), "{err}");
    assert!(err.contains("kernel 5.10 or newer"), "{err}");
    // The same data directory serves once io_uring is allowed.
    let srv = start(root.path(), &args, &[]).listening("io_uring allowed");
    let r = Conn::connect(srv.port).request("PUT", "/v1/stream/after-refusal", &[], b"");
    assert_eq!(r.status, 201, "{}", r.summary());
}

#[test]
fn a_file_system_without_o_direct_fails_when_required_and_runs_buffered_when_optional() {
    let root = TempDir::new("ops-nodio");
    let data = root.path().join("data");
    let base = ["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "1", "--no-pin"];
    let required = [&base[..], &["--direct-io", "required"]].concat();
    let err = start_with(root.path(), &required, &[], Some(seccomp::no_o_direct))
        .failed_with("direct-io required", EX_CONFIG);
    assert!(
        err.contains("--direct-io required") && err.contains(s(&data)) && err.contains("refuses O_DIRECT"),
        "{err}"
    );
    assert!(err.contains("--direct-io optional"), "the message offers the way out: {err}");

    let optional = [&base[..], &["--direct-io", "optional"]].concat();
    let srv = start_with(root.path(), &optional, &[], Some(seccomp::no_o_direct)).listening("direct-io optional");
    let mut c = Conn::connect(srv.port);
    assert_eq!(c.request("PUT", "/v1/stream/buffered", &[], b"").status, 201);
    let r = c.request("POST", "/v1/stream/buffered", &[("content-type", "application/octet-stream")], b"abc");
    assert_eq!(r.status, 204, "{}", r.summary());
    let log = srv.kill();
    assert!(log.contains("direct I/O: off"), "optional without O_DIRECT runs buffered and says so:\n{log}");
}

#[test]
fn locked_memory_below_the_floor_fails_naming_the_limit() {
    let root = TempDir::new("ops-memlock");
    let data = root.path().join("data");
    let args = ["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "2", "--no-pin"];
    let err = start_with(root.path(), &args, &[], Some(memlock_64k)).failed_with("memlock 64 KiB", EX_CONFIG);
    assert!(err.contains("RLIMIT_MEMLOCK is 65536 bytes (hard limit 65536)"), "{err}");
    assert!(err.contains("ulimit -l") && err.contains("LimitMEMLOCK="), "the message says how to raise it: {err}");
}

#[test]
fn locked_memory_short_of_registered_buffers_warns_and_still_serves() {
    let root = TempDir::new("ops-memlock-low");
    let data = root.path().join("data");
    let args = ["--listen", "127.0.0.1:0", "--data-dir", s(&data), "--shards", "2", "--no-pin"];
    let srv = start_with(root.path(), &args, &[], Some(memlock_1m_without_cap_ipc_lock)).listening("memlock 1 MiB");
    let status = std::fs::read_to_string(format!("/proc/{}/status", srv.pid())).unwrap();
    let cap_eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim).unwrap_or("0");
    let has_ipc_lock = u64::from_str_radix(cap_eff, 16).unwrap() & (1 << 14) != 0;
    let mut c = Conn::connect(srv.port);
    assert_eq!(c.request("PUT", "/v1/stream/degraded", &[], b"").status, 201);
    let r = c.request("POST", "/v1/stream/degraded", &[("content-type", "application/octet-stream")], b"abc");
    assert_eq!(r.status, 204, "{}", r.summary());
    let r = c.request("GET", "/v1/stream/degraded?offset=-1", &[], b"");
    assert_eq!((r.status, &r.body[..]), (200, &b"abc"[..]), "{}", r.summary());
    let log = srv.kill();
    assert!(!has_ipc_lock, "the test could not drop CAP_IPC_LOCK from the server (CapEff {cap_eff})");
    assert!(log.contains("RLIMIT_MEMLOCK hard limit is 1048576 bytes"), "{log}");
    assert!(log.contains("falls back to unregistered buffers") && log.contains("CAP_IPC_LOCK"), "{log}");
}

#[test]
fn the_log_level_hides_info_lines_but_not_the_listening_line() {
    let root = TempDir::new("ops-log");
    let args = |dir: &'static str, extra: &'static [&'static str]| -> Vec<String> {
        let mut v: Vec<String> = ["--listen", "127.0.0.1:0", "--shards", "1", "--no-pin", "--data-dir"]
            .iter()
            .map(|x| x.to_string())
            .collect();
        v.push(root.path().join(dir).display().to_string());
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let run = |a: Vec<String>, env: &[(&str, &str)]| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let srv = start(root.path(), &a, env).listening("log test");
        std::thread::sleep(Duration::from_millis(100));
        srv.kill()
    };

    // The default level (info) shows the startup summary...
    let log = run(args("a", &[]), &[]);
    for want in ["ringstream starting", "shards=1", "direct I/O:", "recovered the logs", "recovery_ms="] {
        assert!(log.contains(want), "info log lacks {want:?}:\n{log}");
    }
    // ...and `--log-level warn` hides it, although RUST_LOG asks for debug.
    let log = run(args("b", &["--log-level", "warn"]), &[("RUST_LOG", "debug")]);
    assert!(!log.contains("ringstream starting") && !log.contains("direct I/O"), "warn level logged info:\n{log}");
    // RINGSTREAM_LOG too.
    let log = run(args("c", &[]), &[("RINGSTREAM_LOG", "error")]);
    assert!(!log.contains("ringstream starting"), "RINGSTREAM_LOG=error logged info:\n{log}");

    // JSON lines with the startup fields.
    let log = run(args("d", &["--log-format", "json"]), &[]);
    let events: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let starting = events
        .iter()
        .find(|e| e["fields"]["message"] == "ringstream starting")
        .unwrap_or_else(|| panic!("no starting event in {log}"));
    assert_eq!(starting["fields"]["shards"], 1, "{starting}");
    assert_eq!(starting["level"], "INFO", "{starting}");
}

#[test]
fn a_request_does_not_log_a_line_at_the_default_level() {
    let root = TempDir::new("ops-quiet");
    let data = root.path().join("data");
    let srv =
        start(root.path(), &["--listen", "127.0.0.1:0", "--shards", "1", "--no-pin", "--data-dir", s(&data)], &[])
            .listening("quiet");
    std::thread::sleep(Duration::from_millis(100));
    let before = srv.stderr().lines().count();
    let mut c = Conn::connect(srv.port);
    for i in 0..20 {
        let (path, text) = (format!("/v1/stream/q{i}"), [("Content-Type", "text/plain")]);
        assert_eq!(c.request("PUT", &path, &text, b"").status, 201);
        assert_eq!(c.request("POST", &path, &text, b"x").status, 204);
        assert_eq!(c.request("GET", &format!("{path}?offset=-1"), &[], b"").status, 200);
    }
    let log = srv.kill();
    assert_eq!(log.lines().count(), before, "requests logged lines:\n{log}");
}

#[test]
fn docs_list_every_setting_with_its_environment_variable() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md")).unwrap();
    let cmd = ringstream::cli::Cli::command();
    let mut missing = Vec::new();
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if ["help", "version"].contains(&long) {
            continue;
        }
        if !doc.contains(&format!("--{long}")) {
            missing.push(format!("--{long}"));
        }
        if let Some(env) = arg.get_env() {
            let env = env.to_string_lossy();
            if !doc.contains(env.as_ref()) {
                missing.push(env.into_owned());
            }
        }
        if let Some(default) = arg.get_default_values().first() {
            let default = default.to_string_lossy();
            if !doc.contains(&format!("`{default}`")) {
                missing.push(format!("default `{default}` of --{long}"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/operations.md does not mention: {missing:?}");
}

#[test]
fn shards_pin_to_the_cpus_the_process_is_allowed() {
    let taskset = Path::new("/usr/bin/taskset");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !taskset.exists() || cpus < 2 {
        eprintln!("needs taskset and 2 CPUs; skipped");
        return;
    }
    // Allowed only the last CPU: shard 0 must be pinned there, not to CPU 0.
    let last = (cpus - 1).to_string();
    let root = TempDir::new("ops-cpus");
    let data = root.path().join("data");
    let mut cmd = Command::new(taskset);
    cmd.args(["-c", &last]).arg(common::server_binary());
    cmd.args(["--listen", "127.0.0.1:0", "--shards", "1", "--data-dir", s(&data)]);
    for (k, _) in std::env::vars() {
        if k.starts_with("RINGSTREAM_") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(parse_port(&line).is_some(), "{line}");
    let pid = child.id(); // taskset execs the server, so this is its pid
    let mut shard_cpus = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with("shard-0") {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim();
            shard_cpus.push(allowed.to_string());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(!shard_cpus.is_empty(), "no shard-0 thread found");
    assert!(shard_cpus.iter().all(|c| *c == last), "shard 0 threads allowed on {shard_cpus:?}, want {last}");
}

#[test]
fn a_network_address_without_an_auth_file_is_refused_naming_both_ways_out() {
    let root = TempDir::new("ops-open");
    let data = root.path().join("data");
    let base = ["--shards", "1", "--no-pin", "--data-dir", s(&data)];
    for (listen, env) in [("0.0.0.0:0", false), ("[::]:0", false), ("0.0.0.0:0", true)] {
        let args: Vec<&str> = if env { base.to_vec() } else { [&["--listen", listen][..], &base].concat() };
        let envs: &[(&str, &str)] = if env { &[("RINGSTREAM_LISTEN", listen)] } else { &[] };
        let e = start(root.path(), &args, envs).failed(listen);
        assert!(e.contains("is not a loopback address"), "{e}");
        assert!(e.contains("--auth-file PATH") && e.contains("--no-auth"), "both ways out: {e}");
        let origin = if env { "(set by RINGSTREAM_LISTEN)" } else { "(set by --listen)" };
        assert!(e.contains(origin), "{e}");
        assert!(!data.exists(), "refused before the data directory is touched");
    }
    // --no-auth says it is meant: it serves, and warns.
    let srv =
        start(root.path(), &[&["--listen", "0.0.0.0:0", "--no-auth"][..], &base].concat(), &[]).listening("--no-auth");
    assert!(srv.line.contains("0.0.0.0:"), "{}", srv.line);
    let mut c = Conn::connect(srv.port);
    assert_eq!(c.request("PUT", "/v1/stream/open/s", &[("Content-Type", "text/plain")], b"").status, 201);
    assert!(srv.kill().contains("access control: off (--no-auth)"));
    // An auth file: it serves, and wants tokens.
    let auth = root.path().join("auth.toml");
    std::fs::write(&auth, "[[token]]\nname = \"t\"\nsha256 = \"2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"\nbuckets = [\"*\"]\nrights = [\"admin\"]\n").unwrap();
    let srv = start(root.path(), &[&["--listen", "0.0.0.0:0", "--auth-file", s(&auth)][..], &base].concat(), &[])
        .listening("--auth-file");
    let mut c = Conn::connect(srv.port);
    assert_eq!(c.request("GET", "/v1/stream/open/s?offset=-1", &[], b"").status, 401);
    let ok = c.request("GET", "/v1/stream/open/s?offset=-1", &[("Authorization", "Bearer secret")], b"");
    assert_eq!(ok.status, 200, "the stream made before is there");
    drop(srv);
    // Both at once contradict each other.
    let e = start(root.path(), &[&["--auth-file", s(&auth), "--no-auth"][..], &base].concat(), &[]).failed("both");
    assert!(e.contains("contradict"), "{e}");
}

#[test]
fn an_auth_file_that_does_not_load_stops_the_start_naming_it() {
    let root = TempDir::new("ops-authfile");
    let data = root.path().join("data");
    let auth = root.path().join("auth.toml");
    let base = ["--listen", "127.0.0.1:0", "--shards", "1", "--no-pin", "--data-dir", s(&data)];
    let e = start(root.path(), &[&base[..], &["--auth-file", s(&auth)]].concat(), &[]).failed("missing file");
    assert!(e.contains(&format!("--auth-file {}: reading it", auth.display())), "{e}");
    std::fs::write(&auth, "[[token]]\nname = \"t\"\nsha256 = \"abc\"\nbuckets = [\"*\"]\nrights = [\"read\"]\n")
        .unwrap();
    let env = [("RINGSTREAM_AUTH_FILE", s(&auth))];
    let e = start(root.path(), &base, &env).failed("bad sha256");
    assert!(e.contains("[[token]] #1 (\"t\"): sha256 must be"), "{e}");
    assert!(!data.exists(), "refused before the data directory is touched");
}
