//! One encoding of `/metrics` for every scrape that waits for it.
//!
//! Encoding the page costs time and a page's worth of memory, so concurrent scrapes must
//! not each pay it. Scrapes queue for one encoder; a scrape takes the page the one before
//! it encoded if that encoding started after the scrape arrived (so no scrape is answered
//! with counts older than its own arrival), and encodes a fresh one otherwise. However
//! many scrapes arrive together, they cost at most two encodings: the one under way when
//! they came, and one that they all share. A page nobody waits for is not kept.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prometheus_client::registry::Registry;

/// A page and when its encoding started.
struct Page {
    started: Instant,
    text: Bytes,
}

/// Why the page could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("encoding the metrics failed: {0}")]
    Encode(std::fmt::Error),
    #[error("encoding the metrics failed: the encoder stopped ({0})")]
    Task(String),
}

/// The registry and the page last encoded from it.
pub struct SharedScrapes {
    registry: Arc<Registry>,
    page: tokio::sync::Mutex<Option<Page>>,
    /// Scrapes waiting for the encoder: a page is kept only for them.
    waiting: AtomicUsize,
    /// The last page's length, so that the next one is written into one allocation.
    last_len: AtomicUsize,
}

impl SharedScrapes {
    pub fn new(registry: Registry) -> Self {
        Self {
            registry: Arc::new(registry),
            page: tokio::sync::Mutex::new(None),
            waiting: AtomicUsize::new(0),
            last_len: AtomicUsize::new(0),
        }
    }

    /// The page, encoded after this call began.
    pub async fn page(&self) -> Result<Bytes, ScrapeError> {
        let arrived = Instant::now();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut page = self.page.lock().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if page.as_ref().is_some_and(|p| p.started >= arrived) {
            // The last of those who waited for it lets it go.
            let shared = match self.waiting.load(Ordering::SeqCst) {
                0 => page.take(),
                _ => page.as_ref().map(|p| Page {
                    started: p.started,
                    text: p.text.clone(),
                }),
            };
            if let Some(shared) = shared {
                return Ok(shared.text);
            }
        }
        // Nobody who came before this encoding can share the old page any more.
        *page = None;
        let started = Instant::now();
        let registry = self.registry.clone();
        let last_len = self.last_len.load(Ordering::Relaxed);
        let text = tokio::task::spawn_blocking(move || {
            let mut text = String::with_capacity(last_len + last_len / 8);
            prometheus_client::encoding::text::encode(&mut text, &registry).map(|()| Bytes::from(text))
        })
        .await
        .map_err(|e| ScrapeError::Task(e.to_string()))?
        .map_err(ScrapeError::Encode)?;
        self.last_len.store(text.len(), Ordering::Relaxed);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            *page = Some(Page {
                started,
                text: text.clone(),
            });
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::collector::Collector;
    use prometheus_client::encoding::DescriptorEncoder;
    use prometheus_client::metrics::counter::Counter;
    use std::time::Duration;

    /// A collector that takes its time, so that scrapes overlap.
    #[derive(Debug)]
    struct Slow;

    impl Collector for Slow {
        fn encode(&self, _: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            std::thread::sleep(Duration::from_millis(50));
            Ok(())
        }
    }

    fn scrapes() -> (Arc<SharedScrapes>, Counter) {
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("hits", "Hits", counter.clone());
        registry.register_collector(Box::new(Slow));
        (Arc::new(SharedScrapes::new(registry)), counter)
    }

    #[tokio::test]
    async fn a_scrape_never_sees_counts_older_than_its_arrival() {
        let (scrapes, counter) = scrapes();
        for expected in 1..=3 {
            counter.inc();
            let page = scrapes.page().await.unwrap();
            let text = std::str::from_utf8(&page).unwrap();
            assert!(text.contains(&format!("hits_total {expected}\n")), "{text}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_scrapes_share_one_page() {
        let (scrapes, _counter) = scrapes();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let scrapes = scrapes.clone();
            tasks.spawn(async move { scrapes.page().await.unwrap() });
        }
        let pages = tasks.join_all().await;
        // The pages of one encoding share their memory.
        let mut distinct: Vec<*const u8> = pages.iter().map(|p| p.as_ptr()).collect();
        distinct.sort();
        distinct.dedup();
        assert!(
            distinct.len() <= 2,
            "16 scrapes at once cost {} encodings",
            distinct.len()
        );
        assert!(
            scrapes.page.lock().await.is_none(),
            "a page nobody waits for is not kept"
        );
    }
}
