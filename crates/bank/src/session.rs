//! The session table: a user's token from login to logout. A token is a keyed hash of the
//! server's secret, the user and the user's login count, so a cookie cannot be forged without
//! the secret and a logged-out cookie stays dead after the next login. Bounded: at most
//! `capacity` sessions, a login beyond that is refused (503) rather than evicting anyone.

use super::besim::mix;
use super::parse::{Cookie, Refusal};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 64;

pub struct Sessions {
    secret: u64,
    capacity: usize,
    live: AtomicUsize,
    /// Logins so far per user (index user - 1).
    logins: Vec<AtomicU32>,
    shards: Vec<Mutex<HashMap<u32, u64>>>,
}

/// The token of a user's `n`th login.
pub fn token(secret: u64, user: u32, n: u32) -> u64 {
    mix(secret ^ mix((user as u64) << 32 | n as u64))
}

impl Sessions {
    pub fn new(users: u32, capacity: usize, secret: u64) -> Sessions {
        Sessions {
            secret,
            capacity,
            live: AtomicUsize::new(0),
            logins: (0..users).map(|_| AtomicU32::new(0)).collect(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, user: u32) -> std::sync::MutexGuard<'_, HashMap<u32, u64>> {
        self.shards[user as usize % SHARDS]
            .lock()
            .expect("session shard lock")
    }

    /// Opens (or renews: a second login replaces the first) `user`'s session.
    pub fn login(&self, user: u32) -> Result<Cookie, Refusal> {
        let slot = (user as usize)
            .checked_sub(1)
            .and_then(|i| self.logins.get(i))
            .ok_or(Refusal::BadLogin)?;
        let mut shard = self.shard(user);
        if !shard.contains_key(&user) {
            if self.live.load(Ordering::Relaxed) >= self.capacity {
                return Err(Refusal::Full);
            }
            self.live.fetch_add(1, Ordering::Relaxed);
        }
        // Under the shard lock: logins of one user are ordered.
        let n = slot.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let t = token(self.secret, user, n);
        shard.insert(user, t);
        Ok(Cookie { user, token: t })
    }

    /// Whether `c` is a live session.
    pub fn check(&self, c: Option<Cookie>) -> Result<u32, Refusal> {
        let c = c.ok_or(Refusal::NoSession)?;
        match self.shard(c.user).get(&c.user) {
            Some(&t) if t == c.token => Ok(c.user),
            _ => Err(Refusal::NoSession),
        }
    }

    /// Ends `c`'s session (it must be live).
    pub fn logout(&self, c: Option<Cookie>) -> Result<u32, Refusal> {
        let c = c.ok_or(Refusal::NoSession)?;
        let mut shard = self.shard(c.user);
        match shard.get(&c.user) {
            Some(&t) if t == c.token => {
                shard.remove(&c.user);
                self.live.fetch_sub(1, Ordering::Relaxed);
                Ok(c.user)
            }
            _ => Err(Refusal::NoSession),
        }
    }

    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_check_logout() {
        let s = Sessions::new(10, 2, 99);
        let a = s.login(3).unwrap();
        assert_eq!(s.check(Some(a)), Ok(3));
        let forged = Cookie {
            user: 3,
            token: a.token ^ 1,
        };
        assert_eq!(s.check(Some(forged)), Err(Refusal::NoSession));
        assert_eq!(s.check(None), Err(Refusal::NoSession));
        // A second login replaces the first session.
        let b = s.login(3).unwrap();
        assert_ne!(a, b);
        assert_eq!(s.check(Some(a)), Err(Refusal::NoSession));
        assert_eq!(s.live(), 1);
        s.login(4).unwrap();
        assert_eq!(s.login(5), Err(Refusal::Full));
        assert_eq!(s.logout(Some(b)), Ok(3));
        assert_eq!(s.logout(Some(b)), Err(Refusal::NoSession));
        assert_eq!(s.check(Some(b)), Err(Refusal::NoSession));
        // Logged out, logged in again: the old cookie stays dead.
        let c = s.login(3).unwrap();
        assert_ne!(c, b);
        assert_eq!(s.check(Some(b)), Err(Refusal::NoSession));
        assert_eq!(s.login(11), Err(Refusal::BadLogin));
        assert_eq!(s.login(0), Err(Refusal::BadLogin));
    }
}
