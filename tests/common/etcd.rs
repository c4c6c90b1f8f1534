//! A real etcd cluster for the fleet tests (issue 29, tests/fleet_etcd.rs):
//! Debian's `etcd` (package etcd-server) as N members on loopback, each with
//! its data directory and its log in one temporary directory, killed,
//! stopped and restarted by index; optionally serving clients over TLS with
//! client certificates made by `openssl`, and optionally with auth (root
//! and a user limited to a key prefix). The harness and the tests talk to
//! it through Debian's `etcdctl` (package etcd-client), API v3.
//!
//! Members are numbered from 0. Every wait is for an event (a member
//! healthy, a leader agreed on, a process gone), bounded by [`WAIT`]; a
//! failed wait names what it waited for and shows the tail of each
//! member's log, and a panicking test prints them again when the cluster
//! is dropped.

use std::fs::OpenOptions;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use super::{tool, wait_until, WAIT};

/// Raft's heartbeat and election timeout, in milliseconds, raised from
/// etcd's defaults, which suit dedicated servers. Here the members share
/// two cores with builds and other tests, and a follower that misses the
/// leader's heartbeats for one election timeout campaigns: the test then
/// sees a leader change it did not cause, and a put fails with "leader
/// changed". Longer ones, in the ratio of etcd's defaults (etcd refuses an
/// election timeout under five heartbeats), let a member stall for seconds
/// before anyone campaigns. The price: a leader killed on purpose is
/// replaced only after one to two election timeouts (raft randomises it).
const HEARTBEAT_MS: u32 = 250;
const ELECTION_MS: u32 = 2500;

/// The password hash cost when auth is on: the lowest etcd takes. Every
/// etcdctl run with a password authenticates, and at etcd's default cost
/// each of those (and each health poll) burns noticeable CPU on a machine
/// that is short of it; the cost protects nothing in a test.
const BCRYPT_COST: &str = "4";

/// etcdctl's bound on a command unless a test sets one: longer than its
/// own default, for a loaded machine (a healthy cluster answers at once).
const CTL_TIMEOUT: Duration = Duration::from_secs(10);

/// etcdctl's bound on one look at health or status while the harness
/// waits: a member that cannot answer yet (or has died, which the next
/// look notices) should cost one short look, not a long one; the wait
/// itself has its own, longer, bound.
const POLL_TIMEOUT: Duration = Duration::from_secs(3);

/// Lines of each member's log shown when a wait fails or a test panics.
const TAIL_LINES: usize = 25;

/// How a cluster is started: plain (the default), with TLS for clients,
/// with auth, or both.
#[derive(Clone, Debug, Default)]
pub struct EtcdOptions {
    /// Clients talk TLS and must present a certificate from the test CA
    /// (`--client-cert-auth`); peers talk plain HTTP.
    pub tls: bool,
    /// Auth on, with user `tlsfront` allowed to read and write this key
    /// prefix only (and `root`, allowed everything).
    pub auth_prefix: Option<String>,
}

impl EtcdOptions {
    pub fn with_tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Auth on, user `tlsfront` limited to keys starting with `prefix`.
    pub fn with_auth(mut self, prefix: &str) -> Self {
        self.auth_prefix = Some(prefix.to_string());
        self
    }
}

/// The files of a TLS cluster, for a client's configuration: all PEM,
/// made by `openssl` (ECDSA P-256).
#[derive(Clone, Debug)]
pub struct EtcdTls {
    /// The CA that signed the members' and the client's certificates.
    pub ca: PathBuf,
    /// A client certificate with CN `tlsfront` (with auth on, etcd takes a
    /// client that sends no password for that user) and its key.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The members' certificate (for 127.0.0.1 and localhost) and key.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

/// The users of a cluster with auth on.
#[derive(Clone, Debug)]
pub struct EtcdAuth {
    /// `root`'s password; the harness's own etcdctl runs use it.
    pub root_password: String,
    /// `tlsfront`: role `tlsfront`, readwrite on `prefix` (as a prefix).
    pub user: String,
    pub password: String,
    pub prefix: String,
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// A running etcd cluster; every member is killed on drop.
pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    token: String,
    initial_cluster: String,
    /// Set with [`EtcdOptions::tls`].
    pub tls: Option<EtcdTls>,
    /// Set with [`EtcdOptions::with_auth`], once auth is on.
    pub auth: Option<EtcdAuth>,
}

/// How a wait for the cluster ended.
enum Startup {
    Healthy,
    /// A member could not bind its port (taken after it was picked).
    PortTaken,
}

impl EtcdCluster {
    /// `members` etcd members on 127.0.0.1 forming a new cluster (static
    /// `--initial-cluster`, a token of its own), each answering `etcdctl
    /// endpoint health`; with auth, auth is on when this returns. Should a
    /// member find its port taken meanwhile, the cluster is started afresh
    /// on other ports.
    pub fn start(members: usize, opts: EtcdOptions) -> EtcdCluster {
        assert!(members > 0, "an etcd cluster needs a member");
        for _ in 0..3 {
            let mut cluster = EtcdCluster::create(members, &opts);
            for i in 0..members {
                cluster.spawn(i);
            }
            match cluster.wait_for_health() {
                Startup::Healthy => {
                    if let Some(prefix) = &opts.auth_prefix {
                        cluster.enable_auth(prefix);
                    }
                    return cluster;
                }
                Startup::PortTaken => {
                    eprintln!(
                        "etcd: a member's port was taken after it was picked; starting afresh:\n{}",
                        cluster.log_tails()
                    );
                }
            }
        }
        panic!("etcd: three clusters in a row found a port taken after it was picked");
    }

    /// The cluster's members, names, ports and files, nothing started.
    fn create(members: usize, opts: &EtcdOptions) -> EtcdCluster {
        let dir = data_tempdir();
        let token = format!("tlsfront-test-{}-{}", std::process::id(), random_hex(8));
        let members: Vec<Member> = (0..members)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: member_port(),
                peer_port: member_port(),
                data: dir.path().join(format!("m{i}.etcd")),
                log: dir.path().join(format!("m{i}.log")),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let tls = opts.tls.then(|| make_certificates(dir.path()));
        EtcdCluster {
            dir,
            members,
            token,
            initial_cluster,
            tls,
            auth: None,
        }
    }

    /// Number of members, running or not.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The temporary directory holding the data directories, the logs and
    /// the TLS files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Every member's client URL (`http://` or, with TLS, `https://`
    /// 127.0.0.1:PORT), by index, running or not.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Member `i`'s client URL.
    pub fn endpoint(&self, i: usize) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.members[i].client_port)
    }

    /// Whether member `i`'s process is running (started, not killed or
    /// stopped by the harness).
    pub fn running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// The indexes of the running members.
    pub fn running_members(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.running(i)).collect()
    }

    /// Member `i`'s whole log (every start of it, appended).
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.members[i].log).unwrap_or_default()
    }

    /// The last lines of every member's log, for a failure message.
    pub fn log_tails(&self) -> String {
        let mut all = String::new();
        for (i, m) in self.members.iter().enumerate() {
            let log = self.log(i);
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
            all.push_str(&format!(
                "---- etcd member {i} ({}, {}; last {} lines of {}) ----\n{}\n",
                m.name,
                if m.child.is_some() {
                    "running"
                } else {
                    "not running"
                },
                tail.len(),
                m.log.display(),
                tail.join("\n")
            ));
        }
        all
    }

    /// An etcdctl run against the running members, with the client
    /// certificate (TLS) and as root (auth); see [`Ctl`] to change that.
    pub fn ctl(&self) -> Ctl<'_> {
        Ctl {
            cluster: self,
            members: None,
            cert: true,
            timeout: CTL_TIMEOUT,
            user: self
                .auth
                .as_ref()
                .map(|a| ("root".to_string(), a.root_password.clone())),
        }
    }

    /// `etcdctl ARGS` as [`EtcdCluster::ctl`] runs it.
    pub fn etcdctl(&self, args: &[&str]) -> Output {
        self.ctl().run(args)
    }

    /// Put `key` = `value` through any running member; fails the test if
    /// etcd refuses.
    pub fn put(&self, key: &str, value: &str) {
        ok(&self.ctl().run(&["put", "--", key, value]), "put");
    }

    /// Put through member `i`.
    pub fn put_via(&self, i: usize, key: &str, value: &str) {
        ok(&self.ctl().on(i).run(&["put", "--", key, value]), "put");
    }

    /// `key`'s value (linearizable read, through any running member), or
    /// None if it has none.
    pub fn get(&self, key: &str) -> Option<String> {
        value(&ok(
            &self.ctl().run(&["get", "-w", "json", "--", key]),
            "get",
        ))
    }

    /// `key`'s value in member `i`'s own store (a serializable read: what
    /// the member has applied, not asked of the leader).
    pub fn get_from(&self, i: usize, key: &str) -> Option<String> {
        let args = ["get", "--consistency=s", "-w", "json", "--", key];
        value(&ok(&self.ctl().on(i).run(&args), "get"))
    }

    /// The leader's index, once every running member names the same
    /// leader and it is one of them (after a leader is killed, the others
    /// name it until they have elected another).
    pub fn leader(&mut self) -> usize {
        let what = format!(
            "the running etcd members {:?} to agree on a leader among them",
            self.running_members()
        );
        wait_until(WAIT, what, || {
            if let Some((_, said)) = self.exited() {
                panic!("{said}");
            }
            let out = self
                .ctl()
                .timeout(POLL_TIMEOUT)
                .run(&["endpoint", "status", "-w", "json"]);
            let text = String::from_utf8_lossy(&out.stdout);
            let entries: Vec<serde_json::Value> =
                serde_json::from_str(text.trim()).map_err(|e| {
                    format!(
                        "no status list ({e}): {text}{}",
                        String::from_utf8_lossy(&out.stderr)
                    )
                })?;
            // (member index, its id, the leader it names)
            let mut seen = Vec::new();
            for e in &entries {
                let endpoint = e["Endpoint"].as_str().unwrap_or_default();
                let i = (0..self.len()).find(|&i| self.endpoint(i) == endpoint);
                let id = e["Status"]["header"]["member_id"].as_u64();
                let leader = e["Status"]["leader"].as_u64();
                if let (Some(i), Some(id), Some(leader)) = (i, id, leader) {
                    seen.push((i, id, leader));
                }
            }
            let running = self.running_members();
            let answered: Vec<usize> = seen.iter().map(|s| s.0).collect();
            let leaders: Vec<u64> = seen.iter().map(|s| s.2).collect();
            let agreed = running.iter().all(|i| answered.contains(i))
                && leaders.windows(2).all(|w| w[0] == w[1]);
            match seen.iter().find(|s| Some(&s.1) == leaders.first()) {
                Some(&(i, ..)) if agreed => Ok(i),
                _ => Err(format!(
                    "statuses (member, id, leader named) {seen:x?}\n{}",
                    self.log_tails()
                )),
            }
        })
    }

    /// SIGKILL member `i` and reap it.
    pub fn kill(&mut self, i: usize) {
        let mut child = self.members[i]
            .child
            .take()
            .unwrap_or_else(|| panic!("etcd member {i} is not running"));
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stop member `i` as an operator would (SIGTERM: a leader hands over
    /// leadership first), waiting until it has exited.
    pub fn stop_member(&mut self, i: usize) {
        let child = self.members[i]
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("etcd member {i} is not running"));
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        wait_until(WAIT, format!("etcd member {i} to exit on SIGTERM"), || {
            let child = self.members[i].child.as_mut().unwrap();
            match child.try_wait() {
                Ok(Some(_)) => Ok(()),
                _ => Err(self.log_tails()),
            }
        });
        self.members[i].child = None;
    }

    /// Stop every running member, one after the other. Not all at once: a
    /// leader stopping hands its leadership to a follower, and when that
    /// follower is stopping too, the leader waits out etcd's request
    /// timeout (seconds) before it gives up and exits.
    pub fn stop_all(&mut self) {
        for i in self.running_members() {
            self.stop_member(i);
        }
    }

    /// Start member `i` again, on its data directory and ports (it rejoins
    /// as the member it was: with a data directory etcd ignores the
    /// `--initial-cluster*` flags), and wait until every running member is
    /// healthy, which needs a quorum running.
    pub fn start_member(&mut self, i: usize) {
        assert!(!self.running(i), "etcd member {i} is running already");
        self.spawn(i);
        self.wait_healthy();
    }

    /// Start every member not running, then wait until all are healthy.
    pub fn start_all(&mut self) {
        for i in 0..self.len() {
            if !self.running(i) {
                self.spawn(i);
            }
        }
        self.wait_healthy();
    }

    /// Wait until every running member answers `etcdctl endpoint health`
    /// (it has a leader and serves a quorum read). Fails the test if a
    /// member exits meanwhile.
    pub fn wait_healthy(&mut self) {
        match self.wait_for_health() {
            Startup::Healthy => {}
            Startup::PortTaken => panic!(
                "etcd: a member found its port taken on a restart:\n{}",
                self.log_tails()
            ),
        }
    }

    fn wait_for_health(&mut self) -> Startup {
        let what = format!("etcd members {:?} to be healthy", self.running_members());
        wait_until(WAIT, what, || {
            if let Some((i, said)) = self.exited() {
                if self.log(i).contains("address already in use") {
                    return Ok(Startup::PortTaken);
                }
                panic!("{said}");
            }
            self.health()
                .map(|()| Startup::Healthy)
                .map_err(|e| format!("{e}\n{}", self.log_tails()))
        })
    }

    /// Every running member healthy, or what is not.
    fn health(&self) -> Result<(), String> {
        let out = self
            .ctl()
            .timeout(POLL_TIMEOUT)
            .run(&["endpoint", "health", "-w", "json"]);
        let text = String::from_utf8_lossy(&out.stdout);
        let entries: Vec<serde_json::Value> = serde_json::from_str(text.trim()).map_err(|e| {
            format!(
                "no health list ({e}): {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        let unhealthy: Vec<String> = self
            .running_members()
            .into_iter()
            .filter_map(|i| {
                let endpoint = self.endpoint(i);
                let entry = entries.iter().find(|e| e["endpoint"] == endpoint.as_str());
                match entry {
                    Some(e) if e["health"] == true => None,
                    Some(e) => Some(format!("member {i} ({endpoint}): {}", e["error"])),
                    None => Some(format!("member {i} ({endpoint}): not in {text}")),
                }
            })
            .collect();
        if unhealthy.is_empty() {
            Ok(())
        } else {
            Err(unhealthy.join("; "))
        }
    }

    /// A member the harness started that has exited by itself: its
    /// index and what to say of it. Every member found exited is reaped
    /// and marked not running.
    fn exited(&mut self) -> Option<(usize, String)> {
        let mut first = None;
        for (i, m) in self.members.iter_mut().enumerate() {
            let Some(child) = m.child.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                m.child = None;
                first.get_or_insert((i, status));
            }
        }
        let (i, status) = first?;
        let said = format!(
            "etcd member {i} exited by itself ({status}):\n{}",
            self.log_tails()
        );
        Some((i, said))
    }

    /// Start member `i`'s process, its output appended to its log.
    fn spawn(&mut self, i: usize) {
        let client = self.endpoint(i);
        let m = &self.members[i];
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .unwrap();
        let mut cmd = tool("etcd");
        clear_etcd_env(&mut cmd);
        cmd.args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", &HEARTBEAT_MS.to_string()])
            .args(["--election-timeout", &ELECTION_MS.to_string()])
            // A member that was away (killed, or too slow to hear the
            // leader) asks before it campaigns, so coming back does not
            // depose a working leader.
            .arg("--pre-vote=true")
            .args(["--bcrypt-cost", BCRYPT_COST])
            // History is compacted only when a test says so.
            .args(["--auto-compaction-retention", "0"])
            .args(["--logger", "zap", "--log-outputs", "stderr"]);
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&tls.server_cert)
                .arg("--key-file")
                .arg(&tls.server_key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth=true");
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = cmd.spawn().expect(
            "start etcd (Debian package etcd-server: tests/install-packages.sh installs it)",
        );
        self.members[i].child = Some(child);
    }

    /// Users `root` and `tlsfront` (role `tlsfront`: readwrite on
    /// `prefix`), then auth on. Done before auth is on, as etcd asks.
    fn enable_auth(&mut self, prefix: &str) {
        let auth = EtcdAuth {
            root_password: format!("root-{}", random_hex(8)),
            user: "tlsfront".into(),
            password: format!("tlsfront-{}", random_hex(8)),
            prefix: prefix.to_string(),
        };
        let root_pw = format!("--new-user-password={}", auth.root_password);
        let user_pw = format!("--new-user-password={}", auth.password);
        for args in [
            &["user", "add", "root", &root_pw][..],
            &["role", "add", "tlsfront"],
            &[
                "role",
                "grant-permission",
                "tlsfront",
                "--prefix=true",
                "readwrite",
                prefix,
            ],
            &["user", "add", "tlsfront", &user_pw],
            &["user", "grant-role", "tlsfront", "tlsfront"],
            &["auth", "enable"],
        ] {
            ok(&self.ctl().run(args), &args[..2].join(" "));
        }
        self.auth = Some(auth);
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            eprintln!("{}", self.log_tails());
        }
    }
}

/// One etcdctl run: against the running members unless [`Ctl::on`]
/// names one, with the client certificate unless [`Ctl::without_cert`],
/// as root (with auth on) unless [`Ctl::user`] or [`Ctl::anonymous`].
pub struct Ctl<'a> {
    cluster: &'a EtcdCluster,
    members: Option<Vec<usize>>,
    cert: bool,
    user: Option<(String, String)>,
    timeout: Duration,
}

impl Ctl<'_> {
    /// etcdctl's own bound on the command (`--command-timeout`), when a
    /// test expects it to fail (a member stopped, a certificate missing):
    /// etcdctl reports a connection it cannot make only when it runs out.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Only member `i`'s endpoint (running or not).
    pub fn on(mut self, i: usize) -> Self {
        self.members = Some(vec![i]);
        self
    }

    /// No client certificate (the CA is still trusted, so a refusal is
    /// the member's, for the missing certificate).
    pub fn without_cert(mut self) -> Self {
        self.cert = false;
        self
    }

    /// As this user with this password.
    pub fn user(mut self, name: &str, password: &str) -> Self {
        self.user = Some((name.to_string(), password.to_string()));
        self
    }

    /// With no user name or password.
    pub fn anonymous(mut self) -> Self {
        self.user = None;
        self
    }

    /// The command, arguments not yet added (e.g. to give it input).
    pub fn command(&self) -> Command {
        let c = self.cluster;
        let endpoints: Vec<String> = match &self.members {
            Some(m) => m.iter().map(|&i| c.endpoint(i)).collect(),
            None => c.running_members().iter().map(|&i| c.endpoint(i)).collect(),
        };
        let mut cmd = tool("etcdctl");
        clear_etcd_env(&mut cmd);
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", endpoints.join(",")))
            // A bound of its own, so that a run on a cluster without
            // quorum ends with an error, inside the tests' waits.
            .arg(format!("--command-timeout={}ms", self.timeout.as_millis()));
        if let Some(tls) = &c.tls {
            cmd.arg("--cacert").arg(&tls.ca);
            if self.cert {
                cmd.arg("--cert")
                    .arg(&tls.client_cert)
                    .arg("--key")
                    .arg(&tls.client_key);
            }
        }
        if let Some((name, password)) = &self.user {
            cmd.args(["--user", name, "--password", password]);
        }
        cmd
    }

    /// Run `etcdctl ARGS`; its output, whatever its exit status.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect(
                "run etcdctl (Debian package etcd-client: tests/install-packages.sh installs it)",
            )
    }
}

/// The stdout of an etcdctl run that must have succeeded.
pub fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "etcdctl {what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value in `etcdctl get -w json` output, if the key has one.
fn value(json: &str) -> Option<String> {
    use base64::Engine as _;
    let v: serde_json::Value =
        serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("etcdctl get: {e}: {json}"));
    let b64 = v["kvs"].get(0)?["value"].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap_or_else(|e| panic!("etcdctl get: value {b64:?}: {e}"));
    Some(String::from_utf8(bytes).expect("a UTF-8 value"))
}

/// etcd and etcdctl read their settings from `ETCD_*` and `ETCDCTL_*`
/// variables too: none of the caller's environment may change them.
fn clear_etcd_env(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ETCD") {
            cmd.env_remove(name);
        }
    }
}

/// Where the data directories go: a tmpfs if there is one. On the disk,
/// etcd's fsync of every raft entry competes with builds and the other
/// tests, and a slow one shows as a missed heartbeat and an election; a
/// member killed with SIGKILL keeps what it wrote either way (the page
/// cache outlives the process).
///
/// The name carries this process's id: what a test run killed before it
/// could clean up left there (memory, on a tmpfs) is removed by the next.
fn data_tempdir() -> tempfile::TempDir {
    const PREFIX: &str = "tlsfront-etcd-";
    let mut builder = tempfile::Builder::new();
    let prefix = format!("{PREFIX}{}-", std::process::id());
    builder.prefix(&prefix);
    let shm = Path::new("/dev/shm");
    let Ok(entries) = std::fs::read_dir(shm) else {
        return builder.tempdir().unwrap();
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix(PREFIX).and_then(|r| r.split('-').next());
        let stale = pid.is_some_and(|pid| {
            pid.bytes().all(|b| b.is_ascii_digit()) && !Path::new("/proc").join(pid).exists()
        });
        if stale {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    builder
        .tempdir_in(shm)
        .or_else(|_| builder.tempdir())
        .unwrap()
}

/// `n` random bytes as hex.
fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    aws_lc_rs::rand::fill(&mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A loopback TCP port for an etcd member: free now, not handed out by
/// this process before, and below the kernel's ephemeral range. Members
/// bind their ports only once started, and again after each restart, so a
/// port in that range could meanwhile become the kernel's pick for another
/// test's listener or the source port of any connection (the members'
/// own among them); below it, only a program that picks ports the same
/// way can take it, and [`EtcdCluster::start`] starts afresh if one did.
fn member_port() -> u16 {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    // Above the ports of well-known and registered services.
    const LOW: u16 = 10000;
    if ephemeral_low < LOW + 1000 {
        // No room below: the kernel's pick, as the other harnesses take.
        return super::pebble::free_tcp_port();
    }
    for _ in 0..1000 {
        let mut r = [0u8; 2];
        aws_lc_rs::rand::fill(&mut r).unwrap();
        let port = LOW + u16::from_le_bytes(r) % (ephemeral_low - LOW);
        let mut handed_out = HANDED_OUT.lock().unwrap();
        if !handed_out.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free loopback port below {ephemeral_low} in 1000 tries");
}

/// Run openssl in `dir`; fail the test with its words if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = tool("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, the members' certificate (127.0.0.1 and localhost) and a client
/// certificate (CN `tlsfront`), all ECDSA P-256, made by openssl in `dir`.
fn make_certificates(dir: &Path) -> EtcdTls {
    let tls = dir.join("tls");
    std::fs::create_dir(&tls).unwrap();
    let new_key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(new_key);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"]);
    ca.extend(["-subj", "/CN=tlsfront etcd test CA"]);
    openssl(&tls, &ca);
    for (name, cn, san) in [
        (
            "server",
            "etcd",
            Some("subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ),
        // v3 with its extension: rustls (tonic's TLS) refuses to present
        // a v1 certificate, which `x509 -req` makes without extensions.
        ("client", "tlsfront", Some("extendedKeyUsage=clientAuth")),
    ] {
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        let subject = format!("/CN={cn}");
        let mut req = vec!["req", "-new"];
        req.extend(new_key);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
        if let Some(san) = san {
            req.extend(["-addext", san]);
        }
        openssl(&tls, &req);
        let mut sign = vec!["x509", "-req", "-in", &csr, "-out", &pem, "-days", "2"];
        sign.extend(["-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"]);
        sign.extend(["-copy_extensions", "copy"]);
        openssl(&tls, &sign);
    }
    EtcdTls {
        ca: tls.join("ca.pem"),
        client_cert: tls.join("client.pem"),
        client_key: tls.join("client.key"),
        server_cert: tls.join("server.pem"),
        server_key: tls.join("server.key"),
    }
}
