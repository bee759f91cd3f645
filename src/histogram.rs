//! Histograms observed without an atomic read-modify-write: each thread
//! counts into cells of its own, with plain loads and stores, and a scrape
//! adds the threads' cells up.
//!
//! A `prometheus` histogram's `observe` is four locked instructions (its
//! shard's count, the bucket, the sum, the overall count), and a request
//! observes up to four histograms (`sluice_decision_seconds`,
//! `sluice_store_seconds`, `sluice_upstream_seconds`,
//! `sluice_overhead_seconds`). Each locked instruction costs about 20
//! cycles even uncontended and waits for every store before it, the
//! request's cold writes included (docs/benchmarks-history.md, "Cycles, not
//! instructions (issue 84)").
//!
//! A thread's cells are its own for the life of the process: the first
//! [`OWN_SLOTS`] threads that observe any histogram each get a slot; a
//! thread past those shares one slot, written with read-modify-writes, so
//! no observation is lost whatever the threads. Each slot's cells take a
//! cache line per eight cells (three for sluice's 16 or 17 buckets): 12.5 KiB
//! a histogram over its 65 slots. The exposition is the one
//! `prometheus` writes: the same names, labels, buckets and `_sum`/`_count`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto;

/// Threads with cells of their own (a worker thread each, for
/// `server.workers` up to this); the rest share slot `OWN_SLOTS`.
const OWN_SLOTS: usize = 64;

/// Cells per cache line: a thread's cells start on a line of their own, so
/// no two threads write one line.
const CELLS_PER_LINE: usize = 8;

/// Slots handed out so far, across every histogram.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot, once it has observed any histogram.
    static SLOT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The calling thread's slot: its own, or the shared one.
#[inline]
fn slot() -> usize {
    SLOT.with(|slot| match slot.get() {
        Some(taken) => taken,
        None => {
            let taken = NEXT_SLOT.fetch_add(1, Relaxed).min(OWN_SLOTS);
            slot.set(Some(taken));
            taken
        }
    })
}

#[repr(align(64))]
#[derive(Default)]
struct Line([AtomicU64; CELLS_PER_LINE]);

/// One histogram's cells: per slot, a count per bucket (the last one
/// `+Inf`) and the sum's bits.
struct Cells {
    bounds: Box<[f64]>,
    /// Lines per slot.
    stride: usize,
    lines: Box<[Line]>,
}

impl Cells {
    fn new(bounds: &[f64]) -> Cells {
        // Every bucket, `+Inf`, and the sum.
        let stride = (bounds.len() + 2).div_ceil(CELLS_PER_LINE);
        Cells {
            bounds: bounds.into(),
            stride,
            lines: (0..stride * (OWN_SLOTS + 1))
                .map(|_| Line::default())
                .collect(),
        }
    }

    #[inline]
    fn cell(&self, slot: usize, index: usize) -> &AtomicU64 {
        let line = &self.lines[slot * self.stride + index / CELLS_PER_LINE];
        &line.0[index % CELLS_PER_LINE]
    }

    /// Each bucket's count and the sum, over every slot.
    fn totals(&self) -> (Vec<u64>, f64) {
        let buckets = self.bounds.len() + 1;
        let mut counts = vec![0; buckets];
        let mut sum = 0.0;
        for slot in 0..=OWN_SLOTS {
            for (index, count) in counts.iter_mut().enumerate() {
                *count += self.cell(slot, index).load(Relaxed);
            }
            sum += f64::from_bits(self.cell(slot, buckets).load(Relaxed));
        }
        (counts, sum)
    }
}

/// A histogram (one labelled series of a [`PerThreadHistograms`] family).
#[derive(Clone)]
pub struct PerThreadHistogram(Arc<Cells>);

impl PerThreadHistogram {
    /// Counts one observation of `value`.
    #[inline]
    pub fn observe(&self, value: f64) {
        let cells = &*self.0;
        let bucket = cells
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(cells.bounds.len());
        let sum_at = cells.bounds.len() + 1;
        let slot = slot();
        let (count, sum) = (cells.cell(slot, bucket), cells.cell(slot, sum_at));
        if slot < OWN_SLOTS {
            // Only this thread writes these cells.
            count.store(count.load(Relaxed) + 1, Relaxed);
            sum.store(
                (f64::from_bits(sum.load(Relaxed)) + value).to_bits(),
                Relaxed,
            );
        } else {
            count.fetch_add(1, Relaxed);
            let _ = sum.fetch_update(Relaxed, Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
        }
    }

    /// Observations so far, every thread's.
    pub fn sample_count(&self) -> u64 {
        self.0.totals().0.iter().sum()
    }

    fn proto(&self) -> proto::Histogram {
        let (counts, sum) = self.0.totals();
        let mut histogram = proto::Histogram::default();
        let mut cumulative = 0;
        let buckets = self.0.bounds.iter().zip(&counts).map(|(bound, count)| {
            cumulative += count;
            let mut bucket = proto::Bucket::default();
            bucket.set_cumulative_count(cumulative);
            bucket.set_upper_bound(*bound);
            bucket
        });
        histogram.set_bucket(buckets.collect());
        histogram.set_sample_count(counts.iter().sum());
        histogram.set_sample_sum(sum);
        histogram
    }
}

impl std::fmt::Debug for PerThreadHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerThreadHistogram")
            .field("bounds", &self.0.bounds)
            .finish_non_exhaustive()
    }
}

/// A family of [`PerThreadHistogram`]s, one per set of label values,
/// registered as any `prometheus` collector is.
#[derive(Clone)]
pub struct PerThreadHistograms(Arc<Family>);

struct Family {
    desc: Desc,
    bounds: Box<[f64]>,
    series: Mutex<Vec<(Vec<String>, PerThreadHistogram)>>,
}

impl PerThreadHistograms {
    /// The family `name`, with `help`, `bounds` (the buckets' upper
    /// bounds, ascending) and the label names `labels`.
    pub fn new(
        name: &str,
        help: &str,
        bounds: &[f64],
        labels: &[&str],
    ) -> prometheus::Result<PerThreadHistograms> {
        let labels = labels.iter().map(|label| label.to_string()).collect();
        let desc = Desc::new(name.into(), help.into(), labels, Default::default())?;
        Ok(PerThreadHistograms(Arc::new(Family {
            desc,
            bounds: bounds.into(),
            series: Mutex::new(Vec::new()),
        })))
    }

    /// The series of these label values, made at its first use (not on the
    /// request path: callers keep what this returns).
    pub fn with_label_values(&self, values: &[&str]) -> PerThreadHistogram {
        let mut series = self.0.series.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, found)) = series.iter().find(|(known, _)| *known == values) {
            return found.clone();
        }
        let made = PerThreadHistogram(Arc::new(Cells::new(&self.0.bounds)));
        let values = values.iter().map(|value| value.to_string()).collect();
        series.push((values, made.clone()));
        made
    }
}

impl std::fmt::Debug for PerThreadHistograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerThreadHistograms")
            .field("name", &self.0.desc.fq_name)
            .finish_non_exhaustive()
    }
}

impl Collector for PerThreadHistograms {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.0.desc]
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        let series = self.0.series.lock().unwrap_or_else(|e| e.into_inner());
        let metrics = series.iter().map(|(values, histogram)| {
            let names = self.0.desc.variable_labels.iter();
            let labels = names.zip(values).map(|(name, value)| {
                let mut pair = proto::LabelPair::default();
                pair.set_name(name.clone());
                pair.set_value(value.clone());
                pair
            });
            let mut metric = proto::Metric::from_label(labels.collect());
            metric.set_histogram(histogram.proto());
            metric
        });
        let mut family = proto::MetricFamily::default();
        family.set_name(self.0.desc.fq_name.clone());
        family.set_help(self.0.desc.help.clone());
        family.set_field_type(proto::MetricType::HISTOGRAM);
        family.set_metric(metrics.collect());
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, Histogram, HistogramOpts, Registry, TextEncoder};

    fn text(collector: impl Collector + 'static) -> String {
        let registry = Registry::new();
        registry.register(Box::new(collector)).unwrap();
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_exposition_is_the_one_prometheus_writes_for_the_same_observations() {
        let bounds = [0.001, 0.01, 0.1];
        let ours = PerThreadHistograms::new("t_seconds", "Help.", &bounds, &[]).unwrap();
        let theirs =
            Histogram::with_opts(HistogramOpts::new("t_seconds", "Help.").buckets(bounds.to_vec()))
                .unwrap();
        let series = ours.with_label_values(&[]);
        for value in [0.0005, 0.001, 0.05, 0.05, 7.0] {
            series.observe(value);
            theirs.observe(value);
        }
        assert_eq!(text(ours), text(theirs));
    }

    #[test]
    fn every_threads_observations_are_counted_past_the_slots_of_their_own() {
        let family = PerThreadHistograms::new("u_seconds", "Help.", &[1.0], &["backend"]).unwrap();
        let series = family.with_label_values(&["memory"]);
        // More threads than own slots: the last share one, and lose nothing.
        let threads: Vec<_> = (0..OWN_SLOTS + 8)
            .map(|_| {
                let series = series.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        series.observe(0.5);
                    }
                    series.observe(2.0);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let threads = (OWN_SLOTS + 8) as u64;
        assert_eq!(series.sample_count(), threads * 1001);
        let text = text(family.clone());
        assert!(
            text.contains(&format!(
                "u_seconds_bucket{{backend=\"memory\",le=\"1\"}} {}",
                threads * 1000
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "u_seconds_sum{{backend=\"memory\"}} {}",
                threads * 502
            )),
            "{text}"
        );
        // The same label values are the same series.
        assert_eq!(
            family.with_label_values(&["memory"]).sample_count(),
            threads * 1001
        );
    }
}
