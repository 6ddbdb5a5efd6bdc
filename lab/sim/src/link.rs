//! A socket's link to the switch: `lanes` lanes, each carrying one direction at a time. With
//! the dynamic policy a controller samples both directions every SampleTime cycles and turns
//! one lane toward a direction that is saturated while the other is not, steps back toward
//! symmetric when both are, and pays SwitchTime cycles of quiet per turn. Lanes are reset to
//! half and half at every kernel launch.

use crate::server::Server;

pub struct Link {
    pub lanes: u32,
    /// Lanes carrying traffic out of the socket (the rest carry it in).
    pub out_lanes: u32,
    pub lane_bytes_per_cycle: f64,
    pub out: Server,
    pub inn: Server,
    /// Lane turns since the kernel started.
    pub turns: u32,
}

/// The controller's decision for one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    None,
    TowardOut,
    TowardIn,
}

/// The rule (pure, for tests): `out_lanes` of `lanes` and each direction's saturation.
pub fn decide(lanes: u32, out_lanes: u32, out_saturated: bool, in_saturated: bool) -> Turn {
    let half = lanes / 2;
    match (out_saturated, in_saturated) {
        (true, false) if out_lanes < lanes - 1 => Turn::TowardOut,
        (false, true) if out_lanes > 1 => Turn::TowardIn,
        (true, true) if out_lanes > half => Turn::TowardIn,
        (true, true) if out_lanes < half => Turn::TowardOut,
        _ => Turn::None,
    }
}

impl Link {
    pub fn new(lanes: u32, lane_bytes_per_cycle: f64) -> Link {
        let half = lanes / 2;
        Link {
            lanes,
            out_lanes: half,
            lane_bytes_per_cycle,
            out: Server::new(half as f64 * lane_bytes_per_cycle),
            inn: Server::new((lanes - half) as f64 * lane_bytes_per_cycle),
            turns: 0,
        }
    }

    fn apply_lanes(&mut self) {
        self.out
            .set_bandwidth(self.out_lanes as f64 * self.lane_bytes_per_cycle);
        self.inn
            .set_bandwidth((self.lanes - self.out_lanes) as f64 * self.lane_bytes_per_cycle);
    }

    /// Kernel launch: lanes back to half and half, queues empty.
    pub fn reset(&mut self, t: f64) {
        self.out_lanes = self.lanes / 2;
        self.apply_lanes();
        self.out.reset(t);
        self.inn.reset(t);
        self.turns = 0;
    }

    /// One sample of the dynamic controller at `t` over a window of `window` cycles.
    pub fn sample(&mut self, t: f64, window: f64, saturation: f64, switch_cycles: f64) -> Turn {
        let u_out = self.out.take_utilisation(window);
        let u_in = self.inn.take_utilisation(window);
        let turn = decide(
            self.lanes,
            self.out_lanes,
            u_out >= saturation,
            u_in >= saturation,
        );
        match turn {
            Turn::None => return turn,
            Turn::TowardOut => self.out_lanes += 1,
            Turn::TowardIn => self.out_lanes -= 1,
        }
        self.apply_lanes();
        // The link is quiet while the lane turns.
        self.out.pause(t, switch_cycles);
        self.inn.pause(t, switch_cycles);
        self.turns += 1;
        turn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_turns_toward_the_only_saturated_direction_up_to_15_1() {
        assert_eq!(decide(16, 8, true, false), Turn::TowardOut);
        assert_eq!(decide(16, 14, true, false), Turn::TowardOut);
        assert_eq!(decide(16, 15, true, false), Turn::None); // at most 15/1
        assert_eq!(decide(16, 8, false, true), Turn::TowardIn);
        assert_eq!(decide(16, 1, false, true), Turn::None);
        assert_eq!(decide(16, 8, false, false), Turn::None);
    }

    #[test]
    fn both_saturated_steps_back_toward_symmetric() {
        assert_eq!(decide(16, 12, true, true), Turn::TowardIn);
        assert_eq!(decide(16, 3, true, true), Turn::TowardOut);
        assert_eq!(decide(16, 8, true, true), Turn::None);
    }

    #[test]
    fn sampling_moves_bandwidth_costs_quiet_and_launch_resets() {
        let mut l = Link::new(16, 8.0);
        // Saturate out (window 100 cycles, 64 B/cycle out: 6400 B fills it), leave in idle.
        l.out.serve(0.0, 6400);
        let next_free = l.out.serve(0.0, 0);
        assert_eq!(l.sample(100.0, 100.0, 0.99, 100.0), Turn::TowardOut);
        assert_eq!((l.out_lanes, l.turns), (9, 1));
        assert_eq!(l.out.bytes_per_cycle(), 72.0);
        assert_eq!(l.inn.bytes_per_cycle(), 56.0);
        assert!(l.out.serve(100.0, 0) >= next_free.max(100.0) + 100.0);
        l.reset(500.0);
        assert_eq!((l.out_lanes, l.turns), (8, 0));
        assert_eq!(l.out.bytes_per_cycle(), 64.0);
    }
}
