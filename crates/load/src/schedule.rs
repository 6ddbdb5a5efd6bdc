//! Intended send times of an open-loop run.

use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};

/// Yields intended send times (ns since the run's start) at a mean `rate` per second.
pub struct Schedule {
    next_ns: f64,
    gap_ns: f64,
    poisson: Option<(Exp<f64>, SmallRng)>,
}

impl Schedule {
    pub fn new(rate: f64, poisson: bool, seed: u64, start_ns: u64) -> Schedule {
        assert!(rate > 0.0, "rate must be positive");
        let gap_ns = 1e9 / rate;
        let poisson = poisson.then(|| {
            (
                Exp::new(1.0 / gap_ns).expect("positive rate"),
                SmallRng::seed_from_u64(seed),
            )
        });
        Schedule {
            next_ns: start_ns as f64,
            gap_ns,
            poisson,
        }
    }

    pub fn next(&mut self) -> u64 {
        let t = self.next_ns;
        self.next_ns += match &mut self.poisson {
            Some((exp, rng)) => exp.sample(rng),
            None => self.gap_ns,
        };
        t as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_and_poisson_have_the_requested_mean_rate() {
        for poisson in [false, true] {
            let mut s = Schedule::new(100_000.0, poisson, 7, 0);
            let mut last = 0;
            for _ in 0..100_000 {
                last = s.next();
            }
            let secs = last as f64 / 1e9;
            assert!((secs - 1.0).abs() < 0.02, "poisson={poisson}: {secs}");
        }
    }
}
