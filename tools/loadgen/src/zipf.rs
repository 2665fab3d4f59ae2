//! Requests spread over many models by a Zipf law (`--models N --zipf S`): model `k`
//! (0-based) is picked with a probability proportional to `1 / (k + 1)^S`, as tenants'
//! traffic is: a few busy models and a long tail of rare ones. Each client draws from a
//! generator of its own (xorshift64*, seeded by its index), so runs repeat.

/// The cumulative distribution over the models, for drawing by bisection.
#[derive(Debug)]
pub struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    pub fn new(models: usize, exponent: f64) -> Self {
        let mut total = 0.0;
        let mut cumulative: Vec<f64> = (1..=models)
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(exponent);
                total
            })
            .collect();
        for value in &mut cumulative {
            *value /= total;
        }
        Self { cumulative }
    }

    /// A model index for the uniform draw `u` in [0, 1).
    pub fn pick(&self, u: f64) -> usize {
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.cumulative.len().saturating_sub(1))
    }
}

/// xorshift64*: small, fast and good enough to pick models.
#[derive(Debug)]
pub struct Draws(u64);

impl Draws {
    pub fn seeded(seed: u64) -> Self {
        // Never zero (xorshift's fixed point), and seeds far apart.
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A uniform draw in [0, 1).
    pub fn next_unit(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_model_is_picked_as_often_as_the_law_says() {
        let zipf = Zipf::new(1000, 1.0);
        let mut draws = Draws::seeded(7);
        let picks: Vec<usize> = (0..100_000).map(|_| zipf.pick(draws.next_unit())).collect();
        let first = picks.iter().filter(|&&k| k == 0).count() as f64 / picks.len() as f64;
        // 1 / H(1000) = 0.1336
        assert!((first - 0.1336).abs() < 0.01, "{first}");
        assert!(picks.iter().all(|&k| k < 1000));
        let distinct: std::collections::BTreeSet<_> = picks.iter().collect();
        assert!(distinct.len() > 500, "the tail is visited: {}", distinct.len());
    }

    #[test]
    fn a_draw_at_the_top_picks_the_last_model() {
        let zipf = Zipf::new(3, 0.0);
        assert_eq!(zipf.pick(0.0), 0);
        assert_eq!(zipf.pick(0.5), 1);
        assert_eq!(zipf.pick(0.999_999), 2);
    }
}
