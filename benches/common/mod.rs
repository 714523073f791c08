//! Shared criterion settings: short runs, so `cargo bench` stays a few
//! minutes on a 2-core machine (override with criterion's CLI flags).

use criterion::Criterion;
use std::time::Duration;

pub fn short() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}
