//! What the services that keep data in a real memcached share: the client (pooled
//! connections with time limits) and the client queue, a thread per GPU slot that does a
//! cohort's memcached I/O while the engine's control thread serves the other slots.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long one memcached call may take before the request gets its error.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// How long a call waits for a pooled connection. With memcached gone, the pool retries
/// connecting until this passes: kept well under the persistent engine's 1 s watchdog
/// (measured: at 2 s, a client-queue thread blocked past it and the kernels were restarted,
/// answering 3872 requests INTERNAL instead of UNAVAILABLE).
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);

/// A client of the memcached at `addr` (HOST:PORT, ASCII protocol, no Nagle) with up to
/// `connections` pooled connections; Err unless it answers now.
pub fn connect(addr: &str, connections: u32) -> Result<memcache::Client, String> {
    let url = format!("memcache://{addr}?tcp_nodelay=true&protocol=ascii");
    let fail = |e: memcache::MemcacheError| format!("memcached at {addr}: {e}");
    let client = memcache::Client::builder()
        .add_server(url.as_str())
        .map_err(fail)?
        .with_max_pool_size(connections.max(1))
        .with_min_idle_conns(1)
        .with_connection_timeout(CONNECT_TIMEOUT)
        .with_read_timeout(TIMEOUT)
        .with_write_timeout(TIMEOUT)
        .build()
        .map_err(fail)?;
    client.version().map_err(fail)?;
    Ok(client)
}

/// A slot's client queue: one thread that runs `work` on each job handed to it, one job at
/// a time (a slot has one cohort in its host phase at once), and hands it back.
pub struct ClientQueue<T: Send + 'static> {
    jobs: Option<mpsc::SyncSender<T>>,
    done: mpsc::Receiver<T>,
    thread: Option<JoinHandle<()>>,
}

impl<T: Send + 'static> ClientQueue<T> {
    pub fn spawn(
        name: &str,
        mut work: impl FnMut(&mut T) + Send + 'static,
    ) -> Result<ClientQueue<T>, String> {
        // Queues of one never block their sender: one job per slot at a time.
        let (jobs, todo) = mpsc::sync_channel::<T>(1);
        let (finished, done) = mpsc::sync_channel::<T>(1);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for mut job in todo {
                    work(&mut job);
                    if finished.send(job).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| format!("spawning a memcached client queue: {e}"))?;
        Ok(ClientQueue {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }

    /// Hands `job` over; when the queue cannot take it, the job comes back with the reason.
    pub fn start(&self, job: T) -> Result<(), (T, &'static str)> {
        let jobs = self.jobs.as_ref().expect("open until drop");
        jobs.try_send(job).map_err(|e| match e {
            mpsc::TrySendError::Full(j) => (j, "busy"),
            mpsc::TrySendError::Disconnected(j) => (j, "gone"),
        })
    }

    /// The job back once its work is done; None while it runs (never blocks).
    pub fn poll(&self) -> Result<Option<T>, String> {
        match self.done.try_recv() {
            Ok(job) => Ok(Some(job)),
            Err(mpsc::TryRecvError::Empty) => Ok(None),
            Err(mpsc::TryRecvError::Disconnected) => {
                Err("the memcached client queue ended with a job".into())
            }
        }
    }
}

impl<T: Send + 'static> Drop for ClientQueue<T> {
    fn drop(&mut self) {
        // Closing the queue ends the thread after the job it may be running.
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A memcached this process started on a free loopback port (tests and benches; the
/// scripts install it from Debian). Killed on drop.
pub struct Spawned {
    child: std::process::Child,
    pub addr: String,
}

impl Spawned {
    /// Starts `memcached` from PATH with `memory_mb` of item memory; Err when it is not
    /// installed or does not come up. A port seen free can be taken before memcached binds it
    /// (other tests draw from the same range); memcached then exits at once, and this tries a
    /// fresh port, up to five.
    pub fn start(memory_mb: u32) -> Result<Spawned, String> {
        let mut why = String::new();
        for _ in 0..5 {
            match Spawned::start_once(memory_mb)? {
                Ok(me) => return Ok(me),
                Err(exited) => why = exited,
            }
        }
        Err(why)
    }

    /// One start on one free port: the outer Err when memcached is missing or never listens,
    /// the inner when it exited at start.
    fn start_once(memory_mb: u32) -> Result<Result<Spawned, String>, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("finding a free port: {e}"))?
            .port();
        // As root, memcached must be told whom to run as.
        let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
        let child = std::process::Command::new("memcached")
            .args(["-l", "127.0.0.1", "-U", "0", "-t", "4", "-c", "4096"])
            .args([
                "-p",
                &port.to_string(),
                "-m",
                &memory_mb.to_string(),
                "-u",
                &user,
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("starting memcached (apt-get install memcached): {e}"))?;
        let mut me = Spawned {
            child,
            addr: format!("127.0.0.1:{port}"),
        };
        for _ in 0..200 {
            if let Ok(Some(st)) = me.child.try_wait() {
                return Ok(Err(format!("memcached exited at start: {st}")));
            }
            // Asked its version, not just connected to: whoever took the port would accept.
            if answers_version(&me.addr) {
                return Ok(Ok(me));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Err("memcached did not listen within 5 s".into())
    }

    /// Stops it now (the backend then answers 503 pages).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a memcached answers `version` at `addr` within a second.
fn answers_version(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let mut got = [0u8; 8];
    c.set_read_timeout(Some(Duration::from_secs(1))).is_ok()
        && c.write_all(b"version\r\n").is_ok()
        && c.read_exact(&mut got).is_ok()
        && &got == b"VERSION "
}

/// A spawned memcached, or None with the reason printed where the test log shows it;
/// `COHORT_REQUIRE_MEMCACHED=1` (the test script sets it after installing memcached) turns
/// the skip into a failure.
pub fn spawn_for_test(memory_mb: u32) -> Option<Spawned> {
    match Spawned::start(memory_mb) {
        Ok(s) => Some(s),
        Err(e) if std::env::var("COHORT_REQUIRE_MEMCACHED").as_deref() != Ok("1") => {
            // Straight to stderr: libtest keeps a passing test's eprintln! to itself, and
            // scripts/test.sh counts `SKIPPED TEST: REASON` lines as skips, not passes.
            use std::io::Write;
            let thread = std::thread::current();
            let test = thread.name().unwrap_or("a test");
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: no memcached: {e}");
            None
        }
        Err(e) => panic!("COHORT_REQUIRE_MEMCACHED=1 but {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_goes_out_and_comes_back_done_and_a_second_waits_its_turn() {
        let q = ClientQueue::spawn("test-queue", |n: &mut u32| *n += 1).unwrap();
        q.start(41).unwrap();
        let back = loop {
            if let Some(n) = q.poll().unwrap() {
                break n;
            }
            std::thread::yield_now();
        };
        assert_eq!(back, 42);
        assert_eq!(q.poll().unwrap(), None);
    }
}
