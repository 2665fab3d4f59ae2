//! `tensorplug_special_files_refused_total{opener}`: files of model folders that were not
//! regular files (FIFOs, devices, sockets) and were refused — by the host reading a
//! model's files (`opener="host"`), or to a plugin opening one through WASI
//! (`opener="plugin"`). Read at each scrape from the process-wide counters of
//! [`crate::model::files`].

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

#[derive(Debug)]
pub(super) struct SpecialFilesCollector;

impl Collector for SpecialFilesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (host, plugin) = crate::model::files::special_files_refused();
        let mut metric = encoder.encode_descriptor(
            "tensorplug_special_files_refused",
            "Files of model folders refused for not being regular files (FIFOs, devices, sockets), \
             read by the host or opened by a plugin",
            None,
            MetricType::Counter,
        )?;
        for (opener, value) in [("host", host), ("plugin", plugin)] {
            ConstCounter::new(value).encode(metric.encode_family(&[("opener", opener)])?)?;
        }
        Ok(())
    }
}
