//! The queue edge's wire format (NATS JetStream): which model (and version) a request's
//! subject names, where its answer goes, whether a subject a client gave can be published
//! to, and the headers requests and answers carry. A message's body is a REST body.

use super::clip;

/// Headers the queue edge reads on a request and writes on an answer.
pub mod headers {
    /// Request: the subject to answer on (a stored message keeps its headers, not its
    /// reply subject).
    pub const REPLY_TO: &str = "Tensorplug-Reply-To";
    /// Request (binary tensor data) and answer: the JSON part's length.
    pub const JSON_HEADER_LENGTH: &str = "Inference-Header-Content-Length";
    /// Request and answer: JetStream's de-duplication id.
    pub const MSG_ID: &str = "Nats-Msg-Id";
    /// Answer: the request's id (its body's `id`, else its `Nats-Msg-Id`, else
    /// `<stream>-<sequence>`).
    pub const REQUEST_ID: &str = "Tensorplug-Request-Id";
    /// Answer: the request message's sequence in the stream.
    pub const REQUEST_SEQUENCE: &str = "Tensorplug-Request-Sequence";
    /// Answer: the model as the request named it, and the version that answered.
    pub const MODEL: &str = "Tensorplug-Model";
    pub const MODEL_VERSION: &str = "Tensorplug-Model-Version";
    /// Answer: the status REST would have answered with (200, 207, 4xx, 5xx).
    pub const STATUS: &str = "Tensorplug-Status";
    pub const CONTENT_TYPE: &str = "Content-Type";
}

/// The subject a request for `model` (at `version`) is published on.
pub fn request_subject(prefix: &str, model: &str, version: Option<&str>) -> String {
    match version {
        Some(version) => format!("{prefix}.{model}.{version}"),
        None => format!("{prefix}.{model}"),
    }
}

/// The subject an answer for `model` goes to when its request names none.
pub fn answer_subject(prefix: &str, model: &str) -> String {
    format!("{prefix}.{model}")
}

/// What a request's subject asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub model: String,
    pub version: Option<String>,
}

/// The model and version `subject` names below `prefix`: `<prefix>.<model>` or
/// `<prefix>.<model>.<version>`. Model names may hold dots, so `<prefix>.a.b` is model
/// `a.b` when `is_model("a.b")`, and otherwise model `a` at version `b`. None: the subject
/// is not below the prefix.
pub fn target(prefix: &str, subject: &str, is_model: impl Fn(&str) -> bool) -> Option<Target> {
    let rest = subject.strip_prefix(prefix)?.strip_prefix('.')?;
    if rest.is_empty() {
        return None;
    }
    if is_model(rest) {
        return Some(Target {
            model: rest.to_owned(),
            version: None,
        });
    }
    Some(match rest.rsplit_once('.') {
        Some((model, version)) => Target {
            model: model.to_owned(),
            version: Some(version.to_owned()),
        },
        None => Target {
            model: rest.to_owned(),
            version: None,
        },
    })
}

/// Longest subject a client may ask answers to go to.
const MAX_SUBJECT_BYTES: usize = 256;

/// `subject` if an answer can be published to it: tokens of printable ASCII without
/// spaces, no empty token, no wildcard; otherwise why not.
pub fn publishable(subject: &str) -> Result<&str, String> {
    let refuse = |why: &str| {
        Err(format!(
            "header {}: {:?} is not a subject to answer on: {why}",
            headers::REPLY_TO,
            clip(subject)
        ))
    };
    if subject.is_empty() || subject.len() > MAX_SUBJECT_BYTES {
        return refuse("its length must be 1 to 256 bytes");
    }
    if !subject.bytes().all(|b| b.is_ascii_graphic()) {
        return refuse("it may hold printable ASCII only, without spaces");
    }
    if subject
        .split('.')
        .any(|token| token.is_empty() || token == "*" || token == ">")
    {
        return refuse("a token is empty or a wildcard");
    }
    Ok(subject)
}

/// `subject` if a client may have its answer published there: a plain subject
/// ([`publishable`]) that is neither the broker's own (`$JS.API.…` would have the server
/// send JetStream commands, `$SYS.…` system requests) nor a request subject below
/// `request_prefix` (the answer would come back as a request).
pub fn answerable<'a>(subject: &'a str, request_prefix: &str) -> Result<&'a str, String> {
    let subject = publishable(subject)?;
    let refuse = |why: &str| {
        Err(format!(
            "header {}: {:?} is not a subject to answer on: {why}",
            headers::REPLY_TO,
            clip(subject)
        ))
    };
    if subject.starts_with('$') {
        return refuse("subjects starting with `$` are the broker's own");
    }
    if subject == request_prefix || subject.starts_with(&format!("{request_prefix}.")) {
        return refuse("it is a request subject");
    }
    Ok(subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(subject: &str, models: &[&str]) -> Option<(String, Option<String>)> {
        target("tensorplug.infer", subject, |name| models.contains(&name)).map(|t| (t.model, t.version))
    }

    #[test]
    fn a_subject_names_a_model_and_maybe_a_version() {
        assert_eq!(
            parsed("tensorplug.infer.digits", &["digits"]),
            Some(("digits".into(), None))
        );
        assert_eq!(
            parsed("tensorplug.infer.digits.3", &["digits"]),
            Some(("digits".into(), Some("3".into())))
        );
        // Not served: still a target, which the inference path answers 404.
        assert_eq!(parsed("tensorplug.infer.nosuch", &[]), Some(("nosuch".into(), None)));
        assert_eq!(parsed("tensorplug.infer", &[]), None);
        assert_eq!(parsed("tensorplug.inferx.a", &[]), None);
        assert_eq!(parsed("other.a", &[]), None);
    }

    #[test]
    fn a_dotted_model_name_is_the_model_when_served_else_model_and_version() {
        assert_eq!(parsed("tensorplug.infer.a.b", &["a.b"]), Some(("a.b".into(), None)));
        assert_eq!(
            parsed("tensorplug.infer.a.b", &["a"]),
            Some(("a".into(), Some("b".into())))
        );
        assert_eq!(
            parsed("tensorplug.infer.a.b.1", &["a.b"]),
            Some(("a.b".into(), Some("1".into())))
        );
    }

    #[test]
    fn subjects_are_built_as_they_are_parsed() {
        assert_eq!(request_subject("p", "m", None), "p.m");
        assert_eq!(request_subject("p", "m", Some("2")), "p.m.2");
        assert_eq!(answer_subject("tensorplug.answers", "m"), "tensorplug.answers.m");
    }

    #[test]
    fn the_broker_s_own_subjects_and_request_subjects_are_not_answered_on() {
        assert_eq!(answerable("_INBOX.x", "tensorplug.infer"), Ok("_INBOX.x"));
        assert_eq!(
            answerable("tensorplug.inference", "tensorplug.infer"),
            Ok("tensorplug.inference")
        );
        for bad in [
            "$JS.API.STREAM.DELETE.TENSORPLUG_INFER",
            "$SYS.REQ.SERVER.PING",
            "$KV.bucket.key",
            "tensorplug.infer",
            "tensorplug.infer.digits",
        ] {
            let error = answerable(bad, "tensorplug.infer").expect_err(bad);
            assert!(error.starts_with("header Tensorplug-Reply-To: "), "{error}");
        }
    }

    #[test]
    fn only_plain_subjects_are_answered_on() {
        assert_eq!(publishable("_INBOX.abc.1"), Ok("_INBOX.abc.1"));
        for bad in [
            "",
            "a..b",
            "a.*",
            "a.>",
            ".a",
            "a.",
            "a b",
            "a\u{7f}",
            "é",
            &"a".repeat(257),
        ] {
            let error = publishable(bad).expect_err(bad);
            assert!(error.starts_with("header Tensorplug-Reply-To: "), "{error}");
        }
    }
}
