//! A cell's configuration: its voters (`--cell`), this node's id
//! (`--node-id`) and the secret its peers share (`--cell-secret-file`),
//! checked so that a mistake stops the start naming the entry at fault.

use crate::limits::{CELL_SECRET_BYTES_MAX, CELL_SECRET_BYTES_MIN, CELL_VOTERS_MAX, CELL_VOTERS_MIN};
use std::collections::HashSet;
use std::io::Read as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// One member of the cell: its Raft id and the address its peers dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    /// Raft id, positive (raft-rs reserves 0), unique in the cell.
    pub id: u64,
    /// Where the other voters reach this one's peer port.
    pub addr: SocketAddr,
}

impl Voter {
    /// The ports this voter's replicas listen on for their peers: group *i*
    /// (shard *i*) at the `--cell` port + *i*, for `shards` groups. `None`
    /// for port 0 (a peer cannot dial it) or when the last port would pass
    /// 65535.
    pub fn group_ports(&self, shards: usize) -> Option<std::ops::RangeInclusive<u16>> {
        let first = self.addr.port();
        let last = u16::try_from(shards.checked_sub(1)?).ok().and_then(|n| first.checked_add(n))?;
        (first != 0).then_some(first..=last)
    }
}

/// The key every node of a cell holds, with which peers authenticate each
/// other (`cell::auth`), and while a rotation is under way one more key a
/// peer may prove itself with. Its `Debug` shows only lengths.
#[derive(Clone)]
pub struct Secret {
    key: Vec<u8>,
    also: Option<Vec<u8>>,
}

impl Secret {
    /// A secret of CELL_SECRET_BYTES_MIN to CELL_SECRET_BYTES_MAX bytes;
    /// `None` for a shorter or longer one.
    pub fn new(bytes: Vec<u8>) -> Option<Secret> {
        (CELL_SECRET_BYTES_MIN..=CELL_SECRET_BYTES_MAX)
            .contains(&bytes.len())
            .then_some(Secret { key: bytes, also: None })
    }

    /// This secret, also accepting `other`'s key from peers (it proves
    /// itself with its own).
    pub fn also_accepting(self, other: Secret) -> Secret {
        Secret { also: Some(other.key), ..self }
    }

    /// The key's bytes: what this node proves itself with.
    pub fn as_bytes(&self) -> &[u8] {
        &self.key
    }

    /// The keys a peer may prove itself with: this one, and during a
    /// rotation one more.
    pub fn accepted(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(&self.key[..]).chain(self.also.as_deref())
    }

    /// Whether a second key is accepted (a rotation under way).
    pub fn rotating(&self) -> bool {
        self.also.is_some()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the bytes: configurations get logged.
        match &self.also {
            None => write!(f, "Secret({} bytes)", self.key.len()),
            Some(also) => write!(f, "Secret({} bytes, also accepting {} bytes)", self.key.len(), also.len()),
        }
    }
}

/// A replicated node's view of its cell.
#[derive(Debug, Clone)]
pub struct CellConfig {
    /// This node's id: one of `voters`.
    pub node_id: u64,
    /// Every voter, this node included, in the order `--cell` gives them.
    pub voters: Vec<Voter>,
    /// The secret the voters share.
    pub secret: Secret,
    /// `--cell-join`: with no segments, this node copies its peers' before
    /// it takes part, waiting however long until a peer offers segments or
    /// every peer answered (its disk was lost, and a peer that is down may
    /// hold what it acknowledged).
    pub join: bool,
}

/// Why the cell's settings are refused; each message names the setting
/// and the entry at fault.
#[derive(Debug, thiserror::Error)]
pub enum CellConfigError {
    /// `--cell` given but empty.
    #[error("--cell is empty: give the voters as ID@HOST:PORT,ID@HOST:PORT,...")]
    Empty,
    /// An entry that is not `ID@HOST:PORT`.
    #[error("--cell entry {entry:?}: expected ID@HOST:PORT")]
    NoAt {
        /// The entry as given.
        entry: String,
    },
    /// An id that is not a positive integer.
    #[error("--cell entry {entry:?}: the id must be a positive integer (Raft reserves 0)")]
    BadId {
        /// The entry as given.
        entry: String,
    },
    /// An address that does not parse or resolve.
    #[error("--cell entry {entry:?}: bad address: {reason}")]
    BadAddress {
        /// The entry as given.
        entry: String,
        /// What the resolver said.
        reason: String,
    },
    /// Two entries with one id.
    #[error("--cell entry {entry:?}: id {id} is given twice")]
    DuplicateId {
        /// The second entry with the id.
        entry: String,
        /// The id.
        id: u64,
    },
    /// Two entries with one address.
    #[error("--cell entry {entry:?}: address {addr} is given twice")]
    DuplicateAddress {
        /// The second entry with the address.
        entry: String,
        /// The address, resolved.
        addr: SocketAddr,
    },
    /// A voter count other than 3, 5 or 7.
    #[error("--cell names {count} voters; a cell has 3, 5 or 7: {why}")]
    VoterCount {
        /// How many voters were given.
        count: usize,
        /// Why that count is refused.
        why: &'static str,
    },
    /// The secret file cannot be opened or read.
    #[error("--cell-secret-file {}: {source}", path.display())]
    SecretIo {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The secret file is not a regular file.
    #[error("--cell-secret-file {}: not a regular file", path.display())]
    SecretNotAFile {
        /// The file.
        path: PathBuf,
    },
    /// The secret file is readable or writable by others.
    #[error("--cell-secret-file {}: mode {mode:03o} lets others read or write it; run chmod 600 on it", path.display())]
    SecretMode {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The secret is too short or too long.
    #[error(
        "--cell-secret-file {}: the secret has {len} bytes, it needs {CELL_SECRET_BYTES_MIN} to {CELL_SECRET_BYTES_MAX} (one trailing newline is not counted)",
        path.display()
    )]
    SecretSize {
        /// The file.
        path: PathBuf,
        /// The secret's length (at least what was read).
        len: usize,
    },
    /// Both a rotation's next and previous secret at once.
    #[error(
        "{} and {} both exist: a cell secret rotation goes one step at a time (remove {} once every node \
         proves itself with the new secret, then go on)",
        next.display(),
        previous.display(),
        previous.display()
    )]
    SecretRotation {
        /// The next secret's file.
        next: PathBuf,
        /// The previous secret's file.
        previous: PathBuf,
    },
    /// One of the three cell settings without the others.
    #[error("{given} needs {missing} ({what})")]
    Missing {
        /// The setting(s) given.
        given: &'static str,
        /// The setting missing.
        missing: &'static str,
        /// What the missing one gives.
        what: &'static str,
    },
    /// `--node-id` is not among the voters.
    #[error("--node-id {node_id} is not one of the cell's voters (ids {ids:?})")]
    NotAVoter {
        /// The id given.
        node_id: u64,
        /// The voters' ids.
        ids: Vec<u64>,
    },
}

/// The voters of a `--cell` value: `1@127.0.0.1:7001,2@127.0.0.2:7001,...`.
/// Host names resolve now (the first address); ids and addresses are unique;
/// 3, 5 or 7 voters, or with `join` (a node joining a cell, which names
/// itself and the members it knows of) 2 to one more than the most.
pub fn parse_voters(spec: &str, join: bool) -> Result<Vec<Voter>, CellConfigError> {
    if spec.trim().is_empty() {
        return Err(CellConfigError::Empty);
    }
    let mut voters: Vec<Voter> = Vec::new();
    let (mut ids, mut addrs) = (HashSet::new(), HashSet::new());
    for entry in spec.split(',').map(str::trim) {
        let voter = parse_voter(entry)?;
        if !ids.insert(voter.id) {
            return Err(CellConfigError::DuplicateId { entry: entry.to_string(), id: voter.id });
        }
        if !addrs.insert(voter.addr) {
            return Err(CellConfigError::DuplicateAddress { entry: entry.to_string(), addr: voter.addr });
        }
        voters.push(voter);
    }
    match join {
        true if (2..=CELL_VOTERS_MAX + 1).contains(&voters.len()) => {}
        true => {
            let why = "a joining node names itself and 1 to 7 members of its cell";
            return Err(CellConfigError::VoterCount { count: voters.len(), why });
        }
        false => check_count(voters.len())?,
    }
    Ok(voters)
}

fn parse_voter(entry: &str) -> Result<Voter, CellConfigError> {
    let (id, addr) = entry.split_once('@').ok_or_else(|| CellConfigError::NoAt { entry: entry.to_string() })?;
    // u64's parser takes a leading '+'; an id is digits only.
    let id = match id.bytes().all(|b| b.is_ascii_digit()).then(|| id.parse::<u64>()) {
        Some(Ok(id)) if id > 0 => id,
        _ => return Err(CellConfigError::BadId { entry: entry.to_string() }),
    };
    let bad = |reason: String| CellConfigError::BadAddress { entry: entry.to_string(), reason };
    let addr = addr.to_socket_addrs().map_err(|e| bad(e.to_string()))?.next();
    let addr = addr.ok_or_else(|| bad("the name resolves to no address".to_string()))?;
    Ok(Voter { id, addr })
}

fn check_count(count: usize) -> Result<(), CellConfigError> {
    let why = if count < CELL_VOTERS_MIN {
        "fewer than 3 tolerate no failure (a majority of 2 is both)"
    } else if count.is_multiple_of(2) {
        "an even cell tolerates no more failures than the odd one below it (4 tolerate 1, as 3 do)"
    } else if count > CELL_VOTERS_MAX {
        "more make every commit wait on more nodes for failures a cell of 7 (which tolerates 3) does not plan for"
    } else {
        return Ok(());
    };
    Err(CellConfigError::VoterCount { count, why })
}

/// The secret in `path` (read as `read_key` says), also accepting the key in
/// `path.next` or `path.previous` when one of them exists: a rotation under
/// way (docs/operations.md). Both at once are refused: a rotation has one
/// step at a time.
pub fn read_secret(path: &Path) -> Result<Secret, CellConfigError> {
    let key = read_key(path)?;
    let sibling = |ext: &str| PathBuf::from(format!("{}.{ext}", path.display()));
    let (next, previous) = (sibling("next"), sibling("previous"));
    match (next.exists(), previous.exists()) {
        (true, true) => Err(CellConfigError::SecretRotation { next, previous }),
        (true, false) => Ok(key.also_accepting(read_key(&next)?)),
        (false, true) => Ok(key.also_accepting(read_key(&previous)?)),
        (false, false) => Ok(key),
    }
}

/// The key in `path`: a regular file that others can neither read nor
/// write (mode `& 0o006 == 0`), one trailing `\n` or `\r\n` stripped,
/// CELL_SECRET_BYTES_MIN to CELL_SECRET_BYTES_MAX bytes.
fn read_key(path: &Path) -> Result<Secret, CellConfigError> {
    let io = |source| CellConfigError::SecretIo { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    // The checks and the read go through one open file: no swap between them.
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(CellConfigError::SecretNotAFile { path: path.to_path_buf() });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o006 != 0 {
        return Err(CellConfigError::SecretMode { path: path.to_path_buf(), mode });
    }
    let mut bytes = Vec::new();
    // Two bytes of line end, and one more to tell a secret that is too long.
    file.take(CELL_SECRET_BYTES_MAX as u64 + 3).read_to_end(&mut bytes).map_err(io)?;
    strip_line_end(&mut bytes);
    let len = bytes.len();
    Secret::new(bytes).ok_or(CellConfigError::SecretSize { path: path.to_path_buf(), len })
}

fn strip_line_end(bytes: &mut Vec<u8>) {
    if bytes.ends_with(b"\r\n") {
        bytes.truncate(bytes.len() - 2);
    } else if bytes.ends_with(b"\n") {
        bytes.truncate(bytes.len() - 1);
    }
}

impl CellConfig {
    /// The cell from `--node-id`, `--cell` and `--cell-secret-file`: none of
    /// them is a single node (`None`); all three a cell; any other mix is an
    /// error naming the missing setting.
    pub fn resolve(
        node_id: Option<u64>,
        cell: Option<&str>,
        secret_file: Option<&Path>,
        join: bool,
    ) -> Result<Option<CellConfig>, CellConfigError> {
        let missing = |given, missing, what| Err(CellConfigError::Missing { given, missing, what });
        let (node_id, cell, secret_file) = match (node_id, cell, secret_file) {
            (None, None, None) => return Ok(None),
            (Some(n), Some(c), Some(s)) => (n, c, s),
            (Some(_), None, Some(_)) => return missing("--node-id and --cell-secret-file", "--cell", VOTERS),
            (Some(_), None, None) => return missing("--node-id", "--cell", VOTERS),
            (None, None, Some(_)) => return missing("--cell-secret-file", "--cell", VOTERS),
            (None, Some(_), _) => return missing("--cell", "--node-id", "this node's id among the voters"),
            (Some(_), Some(_), None) => return missing("--cell", "--cell-secret-file", "the secret its voters share"),
        };
        let voters = parse_voters(cell, join)?;
        if !voters.iter().any(|v| v.id == node_id) {
            return Err(CellConfigError::NotAVoter { node_id, ids: voters.iter().map(|v| v.id).collect() });
        }
        let secret = read_secret(secret_file)?;
        Ok(Some(CellConfig { node_id, voters, secret, join }))
    }

    /// This node's own entry.
    ///
    /// Panics when `node_id` is not among the voters, which `resolve`
    /// rules out.
    pub fn me(&self) -> &Voter {
        self.voters.iter().find(|v| v.id == self.node_id).expect("resolve checked that node_id is a voter")
    }

    /// The other voters: those this node links to.
    pub fn peers(&self) -> impl Iterator<Item = &Voter> + '_ {
        self.voters.iter().filter(move |v| v.id != self.node_id)
    }
}

const VOTERS: &str = "the cell's voters, ID@HOST:PORT,...";

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp_file(name: &str, bytes: &[u8], mode: u32) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ringstream-cell-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    const THREE: &str = "1@127.0.0.1:7001,2@127.0.0.2:7001,3@127.0.0.3:7001";

    #[test]
    fn three_and_five_voters_parse_in_order() {
        let three = parse_voters(THREE, false).unwrap();
        assert_eq!(three.iter().map(|v| v.id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(three[1].addr, "127.0.0.2:7001".parse().unwrap());
        let five = parse_voters("5@[::1]:1, 4@127.0.0.1:2,3@127.0.0.1:3,2@127.0.0.1:4,1@localhost:5", false).unwrap();
        assert_eq!(five.iter().map(|v| v.id).collect::<Vec<_>>(), [5, 4, 3, 2, 1]);
        assert_eq!(five[0].addr, "[::1]:1".parse().unwrap());
        assert!(five[4].addr.ip().is_loopback() && five[4].addr.port() == 5, "{:?}", five[4]);
    }

    #[test]
    fn bad_entries_are_named() {
        assert!(matches!(parse_voters("", false), Err(CellConfigError::Empty)));
        assert!(matches!(parse_voters(" ", false), Err(CellConfigError::Empty)));
        let cases: [(&str, &str); 8] = [
            ("1@127.0.0.1:1,2-127.0.0.1:2,3@127.0.0.1:3", "2-127.0.0.1:2"),
            ("1@127.0.0.1:1,2@127.0.0.1:2,", "\"\""),
            ("0@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3", "0@"),
            ("+1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3", "+1@"),
            ("x@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3", "x@"),
            ("1@127.0.0.1:1,2@127.0.0.1,3@127.0.0.1:3", "2@127.0.0.1\""),
            ("1@127.0.0.1:1,2@127.0.0.1:99999,3@127.0.0.1:3", "99999"),
            ("1@127.0.0.1:1,2@:2,3@127.0.0.1:3", "2@:2"),
        ];
        for (spec, named) in cases {
            let err = parse_voters(spec, false).unwrap_err().to_string();
            assert!(err.contains(named), "{spec:?}: {err}");
        }
        let err = parse_voters("1@127.0.0.1:1,2@127.0.0.1:2,1@127.0.0.1:3", false).unwrap_err();
        assert!(matches!(err, CellConfigError::DuplicateId { id: 1, .. }), "{err}");
        let err = parse_voters("1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:2", false).unwrap_err();
        assert!(matches!(err, CellConfigError::DuplicateAddress { .. }), "{err}");
        assert!(err.to_string().contains("3@127.0.0.1:2") && err.to_string().contains("twice"), "{err}");
    }

    #[test]
    fn only_three_five_or_seven_voters() {
        let spec = |n: u64| (1..=n).map(|i| format!("{i}@127.0.0.1:{}", 7000 + i)).collect::<Vec<_>>().join(",");
        for n in [3, 5, 7] {
            assert_eq!(parse_voters(&spec(n), false).unwrap().len(), n as usize);
        }
        for (n, why) in [(1, "fewer than 3"), (2, "fewer than 3"), (4, "even"), (6, "even"), (8, "even"), (9, "more")] {
            let err = parse_voters(&spec(n), false).unwrap_err();
            assert!(matches!(err, CellConfigError::VoterCount { count, .. } if count == n as usize), "{n}: {err}");
            assert!(err.to_string().contains(why), "{n}: {err}");
        }
        for n in 2..=8 {
            assert_eq!(parse_voters(&spec(n), true).unwrap().len(), n as usize, "a joining node lists itself too");
        }
        for n in [1, 9] {
            let err = parse_voters(&spec(n), true).unwrap_err();
            assert!(err.to_string().contains("a joining node names itself"), "{n}: {err}");
        }
    }

    #[test]
    fn secrets_are_read_with_one_line_end_stripped() {
        let key = b"0123456789abcdef0123";
        for (name, bytes) in
            [("plain", key.to_vec()), ("lf", [&key[..], b"\n"].concat()), ("crlf", [&key[..], b"\r\n"].concat())]
        {
            let secret = read_secret(&temp_file(name, &bytes, 0o600)).unwrap();
            assert_eq!(secret.as_bytes(), key, "{name}");
        }
        let two = read_secret(&temp_file("two-lf", &[&key[..], b"\n\n"].concat(), 0o400)).unwrap();
        assert_eq!(two.as_bytes(), [&key[..], b"\n"].concat());
        assert_eq!(format!("{:?}", read_secret(&temp_file("debug", key, 0o640)).unwrap()), "Secret(20 bytes)");
        let longest = vec![b'k'; CELL_SECRET_BYTES_MAX];
        assert_eq!(
            read_secret(&temp_file("longest", &longest, 0o600)).unwrap().as_bytes().len(),
            CELL_SECRET_BYTES_MAX
        );
    }

    #[test]
    fn a_rotations_next_or_previous_secret_is_accepted_too_but_not_both() {
        let (key, other) = (b"0123456789abcdef0123", b"another secret of 24 byte");
        for step in ["next", "previous"] {
            let path = temp_file(&format!("rotating-{step}"), key, 0o600);
            temp_file(&format!("rotating-{step}.{step}"), other, 0o600);
            let s = read_secret(&path).unwrap();
            assert_eq!(s.as_bytes(), key, "{step}: proves itself with its own");
            assert_eq!(s.accepted().collect::<Vec<_>>(), vec![&key[..], &other[..]], "{step}");
            assert!(s.rotating());
            assert_eq!(format!("{s:?}"), "Secret(20 bytes, also accepting 25 bytes)");
        }
        let path = temp_file("both", key, 0o600);
        temp_file("both.next", other, 0o600);
        temp_file("both.previous", other, 0o600);
        let err = read_secret(&path).unwrap_err();
        assert!(matches!(err, CellConfigError::SecretRotation { .. }), "{err}");
        assert!(err.to_string().contains("one step at a time"), "{err}");
        // The second file is held to the same rules.
        let path = temp_file("loose", key, 0o600);
        temp_file("loose.next", other, 0o644);
        assert!(matches!(read_secret(&path).unwrap_err(), CellConfigError::SecretMode { .. }));
        assert!(!read_secret(&temp_file("alone", key, 0o600)).unwrap().rotating());
    }

    #[test]
    fn bad_secret_files_are_refused() {
        for mode in [0o604, 0o602, 0o666, 0o644] {
            let err = read_secret(&temp_file(&format!("mode{mode:o}"), b"0123456789abcdef", mode)).unwrap_err();
            assert!(matches!(err, CellConfigError::SecretMode { .. }), "{mode:o}: {err}");
            assert!(err.to_string().contains("chmod 600"), "{err}");
        }
        let short = read_secret(&temp_file("short", b"0123456789abcde\n", 0o600)).unwrap_err();
        assert!(matches!(short, CellConfigError::SecretSize { len: 15, .. }), "{short}");
        let long = read_secret(&temp_file("long", &vec![b'k'; CELL_SECRET_BYTES_MAX + 1], 0o600)).unwrap_err();
        assert!(matches!(long, CellConfigError::SecretSize { .. }), "{long}");
        let empty = read_secret(&temp_file("empty", b"", 0o600)).unwrap_err();
        assert!(matches!(empty, CellConfigError::SecretSize { len: 0, .. }), "{empty}");
        let dir = temp_file("probe", b"", 0o600).parent().unwrap().to_path_buf();
        assert!(matches!(read_secret(&dir), Err(CellConfigError::SecretNotAFile { .. })));
        let none = read_secret(&dir.join("no-such-file")).unwrap_err();
        assert!(
            matches!(none, CellConfigError::SecretIo { .. }) && none.to_string().contains("no-such-file"),
            "{none}"
        );
    }

    #[test]
    fn resolve_needs_all_three_settings_or_none() {
        let secret = temp_file("resolve", b"0123456789abcdef\n", 0o600);
        assert!(CellConfig::resolve(None, None, None, false).unwrap().is_none());
        let cases = [
            (Some(1), None, Some(secret.as_path()), "--cell ("),
            (Some(1), None, None, "--cell ("),
            (None, None, Some(secret.as_path()), "--cell ("),
            (None, Some(THREE), Some(secret.as_path()), "--node-id"),
            (None, Some(THREE), None, "--node-id"),
            (Some(1), Some(THREE), None, "--cell-secret-file"),
        ];
        for (node_id, cell, file, missing) in cases {
            let err = CellConfig::resolve(node_id, cell, file, false).unwrap_err();
            assert!(matches!(err, CellConfigError::Missing { .. }), "{err}");
            assert!(err.to_string().contains(&format!("needs {missing}")), "{err}");
        }
        let err = CellConfig::resolve(Some(4), Some(THREE), Some(&secret), false).unwrap_err();
        assert!(matches!(err, CellConfigError::NotAVoter { node_id: 4, .. }), "{err}");
        assert!(err.to_string().contains("[1, 2, 3]"), "{err}");
        let bad = CellConfig::resolve(Some(1), Some("1@127.0.0.1:1"), Some(&secret), false).unwrap_err();
        assert!(matches!(bad, CellConfigError::VoterCount { count: 1, .. }), "{bad}");
    }

    #[test]
    fn group_ports_run_from_the_voters_port_and_stay_below_65536() {
        let voter = |port: u16| Voter { id: 1, addr: SocketAddr::from(([127, 0, 0, 1], port)) };
        assert_eq!(voter(7001).group_ports(1), Some(7001..=7001));
        assert_eq!(voter(7001).group_ports(4), Some(7001..=7004));
        assert_eq!(voter(65532).group_ports(4), Some(65532..=65535));
        assert_eq!(voter(65533).group_ports(4), None);
        assert_eq!(voter(1).group_ports(256), Some(1..=256));
        assert_eq!(voter(0).group_ports(1), None, "port 0 cannot be dialled");
        assert_eq!(voter(7001).group_ports(0), None);
        assert_eq!(voter(1).group_ports(usize::MAX), None);
    }

    #[test]
    fn a_resolved_cell_knows_itself_and_its_peers() {
        let secret = temp_file("resolved", b"0123456789abcdef", 0o600);
        let cell = CellConfig::resolve(Some(2), Some(THREE), Some(&secret), false).unwrap().unwrap();
        assert_eq!(cell.me().addr, "127.0.0.2:7001".parse().unwrap());
        assert_eq!(cell.peers().map(|v| v.id).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(cell.secret.as_bytes(), b"0123456789abcdef");
        let five = "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3,4@127.0.0.1:4,5@127.0.0.1:5";
        let cell = CellConfig::resolve(Some(5), Some(five), Some(&secret), false).unwrap().unwrap();
        assert_eq!(cell.me().id, 5);
        assert_eq!(cell.peers().map(|v| v.id).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert!(!format!("{cell:?}").contains("0123456789abcdef"));
    }
}
