//! The network between the senders and the receiver: it drops, duplicates and delays
//! messages (independent delays reorder them), and partitions can cut one sender off in
//! one or both directions.

use super::rng::SimRng;

/// How bad the network is in one run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NetworkConfig {
    /// Probability that a message is lost.
    pub drop: f64,
    /// Probability that a message that is not lost arrives twice.
    pub duplicate: f64,
    /// No message spends longer in flight than this, in ms. The senders' safety margin
    /// must cover it, with the clock skew.
    pub max_delay_ms: u64,
}

/// Which way a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// A request, sender to receiver.
    Request,
    /// A reply, receiver to sender.
    Reply,
}

/// What a partition cuts between one sender and the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Nothing: the link works.
    None,
    /// Requests and replies are lost.
    Both,
    /// Requests are lost; replies get through.
    Requests,
    /// Replies are lost: the receiver executes, the sender never hears.
    Replies,
}

impl Cut {
    fn blocks(self, direction: Direction) -> bool {
        match self {
            Cut::None => false,
            Cut::Both => true,
            Cut::Requests => direction == Direction::Request,
            Cut::Replies => direction == Direction::Reply,
        }
    }
}

/// What the network did, for the run's report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NetworkStats {
    /// Messages handed to the network.
    pub sent: u64,
    /// Lost at random.
    pub dropped: u64,
    /// Lost to a partition.
    pub cut: u64,
    /// Delivered twice.
    pub duplicated: u64,
}

/// The links of every sender to the receiver.
#[derive(Debug)]
pub(crate) struct Network {
    config: NetworkConfig,
    cuts: Vec<Cut>,
    /// What happened so far.
    pub stats: NetworkStats,
}

impl Network {
    /// A network for `senders` senders, every link working.
    #[must_use]
    pub(crate) fn new(config: NetworkConfig, senders: usize) -> Network {
        Network {
            config,
            cuts: vec![Cut::None; senders],
            stats: NetworkStats::default(),
        }
    }

    /// Sends one message between `sender` and the receiver: returns the delay of each
    /// copy that will arrive (none when it is lost, two when duplicated).
    pub(crate) fn transmit(
        &mut self,
        rng: &mut SimRng,
        sender: usize,
        direction: Direction,
    ) -> Vec<u64> {
        self.stats.sent += 1;
        if self.cuts[sender].blocks(direction) {
            self.stats.cut += 1;
            return Vec::new();
        }
        if rng.chance(self.config.drop) {
            self.stats.dropped += 1;
            return Vec::new();
        }
        let mut delays = vec![self.delay(rng)];
        if rng.chance(self.config.duplicate) {
            self.stats.duplicated += 1;
            delays.push(self.delay(rng));
        }
        delays
    }

    /// Mostly a LAN, sometimes a slow mobile link, rarely a message stuck in a queue.
    fn delay(&self, rng: &mut SimRng) -> u64 {
        let max = self.config.max_delay_ms.max(1);
        let roll = rng.unit();
        let (lo, hi) = if roll < 0.80 {
            (1, 80)
        } else if roll < 0.97 {
            (80, 3_000)
        } else {
            (3_000, max)
        };
        rng.range(lo.min(max), hi.min(max))
    }

    /// Cuts the link of `sender` as `cut` says (replacing an earlier cut).
    pub(crate) fn partition(&mut self, sender: usize, cut: Cut) {
        self.cuts[sender] = cut;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_respect_the_cap_and_cuts_block_one_way() {
        let config = NetworkConfig {
            drop: 0.0,
            duplicate: 0.5,
            max_delay_ms: 10_000,
        };
        let mut net = Network::new(config, 2);
        let mut rng = SimRng::new(3);
        for _ in 0..1_000 {
            let delays = net.transmit(&mut rng, 0, Direction::Request);
            assert!(!delays.is_empty() && delays.len() <= 2);
            assert!(delays.iter().all(|&d| (1..=10_000).contains(&d)));
        }
        assert!(net.stats.duplicated > 0);
        net.partition(1, Cut::Replies);
        assert!(net.transmit(&mut rng, 1, Direction::Reply).is_empty());
        assert!(!net.transmit(&mut rng, 1, Direction::Request).is_empty());
        net.partition(1, Cut::None);
        assert!(!net.transmit(&mut rng, 1, Direction::Reply).is_empty());
    }
}
