//! Grouping lines for the workers, the way the server's batcher groups items: whenever a
//! worker is free it takes what has been read (up to K lines of equal
//! [`MergeKey`](super::line::MergeKey)), so a lone line is never held back and groups
//! grow by themselves while the workers are busy.

use std::collections::VecDeque;

use tokio::sync::mpsc;

use super::line::Line;

/// Hands workers groups of up to `batch_size` compatible lines.
pub(crate) struct LineGrouper {
    lines: mpsc::Receiver<Line>,
    /// Lines read but not yet taken (they did not fit the group being formed), in order.
    held: VecDeque<Line>,
    batch_size: usize,
}

impl LineGrouper {
    pub(crate) fn new(lines: mpsc::Receiver<Line>, batch_size: usize) -> Self {
        LineGrouper {
            lines,
            held: VecDeque::new(),
            batch_size,
        }
    }

    /// The next group: the oldest line waiting, and as many lines compatible with it as
    /// are waiting (up to the batch size). `None` once every line has been taken.
    pub(crate) async fn next_group(&mut self) -> Option<Vec<Line>> {
        let first = match self.held.pop_front() {
            Some(line) => line,
            None => self.lines.recv().await?,
        };
        let mut group = vec![first];
        let Some(key) = group[0].key.clone() else {
            return Some(group);
        };
        let mut index = 0;
        while group.len() < self.batch_size && index < self.held.len() {
            if self.held[index].key.as_ref() == Some(&key) {
                if let Some(line) = self.held.remove(index) {
                    group.push(line);
                }
            } else {
                index += 1;
            }
        }
        while group.len() < self.batch_size {
            let Ok(line) = self.lines.try_recv() else {
                break;
            };
            if line.key.as_ref() == Some(&key) {
                group.push(line);
            } else {
                // Bounded: every held line holds a window permit.
                self.held.push_back(line);
            }
        }
        Some(group)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::batch::line::test_requests::x;

    #[tokio::test]
    async fn the_grouper_groups_compatible_lines_and_holds_the_others() {
        let permits = Arc::new(tokio::sync::Semaphore::new(16));
        let (tx, rx) = mpsc::channel(16);
        let wide = || x(&[1.0, 2.0], &[1, 2]);
        let narrow = || x(&[1.0], &[1, 1]);
        let requests = [narrow(), wide(), narrow(), narrow(), wide(), narrow()];
        for (seq, r) in requests.into_iter().enumerate() {
            let permit = permits.clone().acquire_owned().await.unwrap();
            tx.send(Line::new(seq as u64, seq as u64, r, permit)).await.unwrap();
        }
        drop(tx);
        let mut grouper = LineGrouper::new(rx, 3);
        let mut groups = Vec::new();
        while let Some(group) = grouper.next_group().await {
            groups.push(group.iter().map(|l| l.seq).collect::<Vec<_>>());
        }
        assert_eq!(groups, vec![vec![0, 2, 3], vec![1, 4], vec![5]]);
    }
}
