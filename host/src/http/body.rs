//! Taking in an inference request's body: what media types and codings are accepted,
//! reading it under the size limit, and decoding it ([`decode_body`]).

use axum::body::Body;
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::HttpError;
use super::response::HEADER_CONTENT_LENGTH;
use crate::api::{decode_body, ServeError};
use crate::protocol::{clip, InferRequest};

/// Refuses (415) a body the server would misread: a media type other than JSON or
/// binary tensor data, a character set other than UTF-8, or a content or transfer
/// coding other than the ones it decodes (none, and HTTP/1.1 chunked framing).
///
/// A missing `Content-Type` is accepted: `tritonclient` sends none with binary data.
pub fn check_media(headers: &HeaderMap) -> Result<(), HttpError> {
    if let Some(value) = headers.get(header::CONTENT_TYPE) {
        let text = value.to_str().unwrap_or("");
        let mut parts = text.split(';').map(str::trim);
        let essence = parts.next().unwrap_or("").to_ascii_lowercase();
        let json = essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"));
        if !(json || essence == "application/octet-stream") {
            return Err(HttpError::UnsupportedMediaType(format!(
                "Content-Type {} is not supported: send application/json (curl: -H 'Content-Type: application/json'), \
                 or application/octet-stream with the binary tensor data extension",
                clip(text)
            )));
        }
        for parameter in parts {
            let Some((name, charset)) = parameter.split_once('=') else {
                continue;
            };
            let charset = charset.trim().trim_matches('"');
            if name.trim().eq_ignore_ascii_case("charset") && !charset.eq_ignore_ascii_case("utf-8") {
                return Err(HttpError::UnsupportedMediaType(format!(
                    "charset {} is not supported: JSON bodies must be UTF-8",
                    clip(charset)
                )));
            }
        }
    }
    only_codings(
        headers,
        header::CONTENT_ENCODING,
        "identity",
        "send the body uncompressed",
    )?;
    only_codings(headers, header::TRANSFER_ENCODING, "chunked", "only chunked")?;
    Ok(())
}

/// Refuses a coding header (`Content-Encoding`, `Transfer-Encoding`) that lists any
/// coding but `allowed`.
fn only_codings(headers: &HeaderMap, name: header::HeaderName, allowed: &str, advice: &str) -> Result<(), HttpError> {
    for value in headers.get_all(&name) {
        let text = value.to_str().unwrap_or("?");
        if text.split(',').map(str::trim).any(|c| !c.eq_ignore_ascii_case(allowed)) {
            return Err(HttpError::UnsupportedMediaType(format!(
                "{name} {} is not supported: {advice}",
                clip(text)
            )));
        }
    }
    Ok(())
}

/// A header holding a byte count, if present.
pub fn header_usize(headers: &HeaderMap, name: &str) -> Result<Option<usize>, ServeError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map(Some)
        .ok_or_else(|| {
            let shown = clip(&String::from_utf8_lossy(value.as_bytes())).into_owned();
            ServeError::Unreadable(format!("header {name}: {shown:?} is not a byte count"))
        })
}

/// Reads the whole body, refusing (413) as soon as it passes `limit` bytes.
pub async fn read_body(body: Body, headers: &HeaderMap, limit: usize) -> Result<bytes::Bytes, HttpError> {
    if let Some(declared) = header_usize(headers, header::CONTENT_LENGTH.as_str())? {
        if declared > limit {
            return Err(ServeError::BodyTooLarge { limit }.into());
        }
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ServeError::BodyTooLarge { limit }.into()),
        Err(e) => Err(ServeError::Unreadable(format!("cannot read the request body: {e}")).into()),
    }
}

/// Decodes a V2 request body, the binary extension's JSON length from its header.
pub async fn decode(body: bytes::Bytes, headers: &HeaderMap) -> Result<InferRequest, ServeError> {
    decode_body(body, header_usize(headers, HEADER_CONTENT_LENGTH)?).await
}
