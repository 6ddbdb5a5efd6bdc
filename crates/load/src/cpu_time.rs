//! CPU time over the measured window: the generator's own (so a run shows when the
//! generator, not the server, was the limit) and, given its pid, the server's (host CPU time
//! per answer, the figure a GPU engine is meant to lower). Linux only; elsewhere absent.

use std::time::Duration;

/// CPU time (user + system) this process has used so far.
pub fn own() -> Option<Duration> {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage; RUSAGE_SELF is always accepted.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Some(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// CPU time (user + system) process `pid` has used so far, from `/proc/PID/stat`.
pub fn of_process(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text, clock_ticks())
}

/// CPU time (user + system) the thread of this process named `name` has used so far, from
/// `/proc/self/task/TID/stat` (the first such thread; None if none runs now).
pub fn of_own_thread(name: &str) -> Option<Duration> {
    // Listing /proc/self/task while other threads of the process start and end can skip a
    // live thread (the kernel resumes the listing by position), the likely cause of a CI run
    // in which the test below missed its own named thread; so a name is absent only when
    // three listings miss it.
    (0..3).find_map(|_| find_own_thread(name))
}

fn find_own_thread(name: &str) -> Option<Duration> {
    for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        // A thread that ended meanwhile has no files left: not the one asked for.
        let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) else {
            continue;
        };
        if comm.trim_end() == name {
            let text = std::fs::read_to_string(t.path().join("stat")).ok()?;
            return parse_stat(&text, clock_ticks());
        }
    }
    None
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// utime + stime of a `/proc/PID/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str, ticks_per_s: u64) -> Option<Duration> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    // After the name: state (3), ppid (4), ... utime is field 14, stime 15.
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000) / ticks_per_s.max(1),
    ))
}

/// The CPU time of the generator and of the server between two samples, as the report's
/// `cpu` object: seconds used and microseconds per answer.
pub struct Sample {
    own: Option<Duration>,
    server: Option<Duration>,
}

impl Sample {
    pub fn take(server_pid: Option<u32>) -> Sample {
        Sample {
            own: own(),
            server: server_pid.and_then(of_process),
        }
    }

    pub fn since(
        &self,
        start: &Sample,
        answers: f64,
        server_pid: Option<u32>,
    ) -> serde_json::Value {
        let part = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => {
                let s = a.saturating_sub(b).as_secs_f64();
                serde_json::json!({
                    "cpu_s": s,
                    "cpu_us_per_answer": if answers > 0.0 { s * 1e6 / answers } else { 0.0 },
                })
            }
            _ => serde_json::Value::Null,
        };
        let server = match server_pid {
            None => serde_json::json!({"absent": "no --server-pid given"}),
            Some(pid) => match part(self.server, start.server) {
                serde_json::Value::Null => {
                    serde_json::json!({"absent": format!("/proc/{pid}/stat not readable")})
                }
                v => v,
            },
        };
        serde_json::json!({ "generator": part(self.own, start.own), "server": server })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_past_the_name() {
        let line = "4242 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100 200 300";
        assert_eq!(parse_stat(line, 100), Some(Duration::from_secs(3)));
        assert_eq!(parse_stat("garbage", 100), None);
        assert_eq!(parse_stat("1 (x) S 1", 100), None);
    }

    #[test]
    fn own_time_grows_and_this_process_is_readable() {
        let a = own().expect("getrusage");
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(own().unwrap() >= a);
        if cfg!(target_os = "linux") {
            assert!(of_process(std::process::id()).is_some());
            let t = std::thread::Builder::new()
                .name("cpu-time-probe".into())
                .spawn(|| {
                    // Named by the thread itself once it runs: ask from inside it.
                    assert!(of_own_thread("cpu-time-probe").is_some());
                })
                .unwrap();
            t.join().unwrap();
            assert!(of_own_thread("no-such-thread").is_none());
        }
    }
}
