//! The download's HTTP semantics, without a socket.

use super::*;
use crate::image::fetch::FetchEnd;

fn retried(r: Result<impl std::fmt::Debug, AttemptError>) -> String {
    match r {
        Err(AttemptError::Retry(why)) => why,
        other => panic!("not retried: {other:?}"),
    }
}

fn fatal(r: Result<impl std::fmt::Debug, AttemptError>) -> ImageError {
    match r {
        Err(AttemptError::Fatal(FetchEnd::Failed(e))) => e,
        other => panic!("not a final failure: {other:?}"),
    }
}

#[test]
fn response_heads_are_read_for_what_the_download_needs() {
    let r = parse_head(
        b"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\nContent-Range: bytes 90-99/100\r\nETag: \"x1\"\r\n\r\n",
    )
    .unwrap();
    assert_eq!(
        r,
        Reply {
            status: 206,
            content_length: Some(10),
            content_range: Some((90, Some(100))),
            etag: Some("\"x1\"".into()),
            chunked: false,
            location: None,
            accept_ranges: false,
            close: false,
        }
    );
    // Whether the server takes ranges and keeps the connection open.
    let r = parse_head(
        b"HTTP/1.1 200 OK\r\nAccept-Ranges: none\r\nConnection: Keep-Alive, close\r\n\r\n",
    )
    .unwrap();
    assert!(!r.accept_ranges && r.close);
    let r = parse_head(b"HTTP/1.1 200 OK\r\naccept-ranges: Bytes\r\n\r\n").unwrap();
    assert!(
        r.accept_ranges && !r.close,
        "HTTP/1.1 keeps connections open"
    );
    let r = parse_head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap();
    assert!(r.close, "HTTP/1.0 closes them");
    let r = parse_head(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n").unwrap();
    assert!(!r.close, "unless it says keep-alive");
    let r = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    assert!(r.chunked && r.content_length.is_none());
    // Transfer-Encoding overrides Content-Length; only a final
    // `chunked` is chunked.
    let r = parse_head(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n",
    )
    .unwrap();
    assert!(r.chunked && r.content_length.is_none());
    let r = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n").unwrap();
    assert!(!r.chunked && r.content_length.is_none());
    let r = parse_head(b"HTTP/1.1 301 Moved\r\nLocation: /b/c.img\r\n\r\n").unwrap();
    assert_eq!(r.location.as_deref(), Some("/b/c.img"));
    assert!(matches!(
        parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
        Err(HeadError::ConflictingLength)
    ));
    assert!(matches!(
        parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"),
        Err(HeadError::ContentLength(_))
    ));
    assert!(parse_head(b"garbage\r\n\r\n").is_err());
    assert!(matches!(
        parse_head(b"HTTP/1.1 200 OK\r\n"),
        Err(HeadError::Incomplete)
    ));
}

#[test]
fn content_range_is_parsed() {
    assert_eq!(
        parse_content_range("bytes 100-199/1000"),
        Some((100, Some(1000)))
    );
    assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, None)));
    assert_eq!(parse_content_range("items 1-2/3"), None);
}

#[test]
fn requests_carry_the_credentials_and_the_resumption_headers() {
    let url = Url::parse("http://[::1]:8080/images/disk.img?sig=1").unwrap();
    let r = request(
        &url,
        &RequestHead {
            authorization: Some("Basic dTpw"),
            range: range_header(42, u64::MAX),
            if_range: Some("\"e\""),
            ..RequestHead::default()
        },
    );
    assert!(r.starts_with("GET /images/disk.img?sig=1 HTTP/1.1\r\nHost: [::1]:8080\r\n"));
    assert!(r.contains("\r\nAuthorization: Basic dTpw\r\n"));
    assert!(r.contains("\r\nRange: bytes=42-\r\nIf-Range: \"e\"\r\n"));
    assert!(r.ends_with("\r\n\r\n"));
    assert_eq!(range_header(0, u64::MAX), None);
    assert_eq!(range_header(0, 4096).as_deref(), Some("bytes=0-4095"));
    // If-Range only with a Range; Proxy-Authorization only with the
    // absolute form (through a tunnel the proxy never sees the request).
    let plain = request(
        &url,
        &RequestHead {
            if_range: Some("\"e\""),
            proxy_authorization: Some("Basic cDpx"),
            ..RequestHead::default()
        },
    );
    assert!(!plain.contains("Range") && !plain.contains("Proxy-Authorization"));
    let proxied = request(
        &url,
        &RequestHead {
            absolute: true,
            proxy_authorization: Some("Basic cDpx"),
            ..RequestHead::default()
        },
    );
    assert!(proxied.starts_with("GET http://[::1]:8080/images/disk.img?sig=1 HTTP/1.1\r\n"));
    assert!(proxied.contains("\r\nProxy-Authorization: Basic cDpx\r\n"));
}

#[test]
fn replies_decide_how_a_download_goes_on() {
    let url = "http://h/img";
    let mut partial = Reply::new(206);
    partial.content_range = Some((100, Some(1000)));
    assert_eq!(
        accept_reply(url, &partial, 100).unwrap(),
        Accepted::Partial { total: Some(1000) }
    );
    assert!(retried(accept_reply(url, &partial, 50)).contains("asked for byte 50"));
    partial.content_range = None;
    assert!(retried(accept_reply(url, &partial, 100)).contains("Content-Range"));
    let mut whole = Reply::new(200);
    whole.content_length = Some(1000);
    whole.etag = Some("\"v2\"".into());
    assert_eq!(
        accept_reply(url, &whole, 100).unwrap(),
        Accepted::Whole {
            skip: 100,
            length: Some(1000),
            etag: Some("\"v2\"".into())
        }
    );
    assert!(matches!(
        fatal(accept_reply(url, &Reply::new(404), 0)),
        ImageError::HttpStatus { status: 404, .. }
    ));
    assert_eq!(
        retried(accept_reply(url, &Reply::new(503), 0)),
        "HTTP 503 Service Unavailable"
    );
    assert!(retried(accept_reply(url, &Reply::new(1000), 0)).contains("not understood"));
}

#[test]
fn redirects_stay_on_http_and_keep_credentials_with_their_origin() {
    let here = Url::parse("https://a.example/img").unwrap();
    let (next, same) = next_hop(&here, 302, "/b/img", 0).unwrap();
    assert_eq!((next.as_str(), same), ("https://a.example/b/img", true));
    let (next, same) = next_hop(&here, 301, "https://b.example:8443/img", 0).unwrap();
    assert_eq!((next.as_str(), same), ("https://b.example:8443/img", false));
    let err = fatal(next_hop(&here, 302, "http://a.example/img", 7));
    assert!(
        matches!(err, ImageError::Download { offset: 7, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("from https to http"), "{err}");
    assert!(fatal(next_hop(&here, 307, "ftp://a.example/img", 0))
        .to_string()
        .contains("ftp:"));
    let plain = Url::parse("http://a.example/img").unwrap();
    let (next, same) = next_hop(&plain, 308, "https://a.example/img", 0).unwrap();
    assert_eq!((next.as_str(), same), ("https://a.example/img", false));
}

#[test]
fn a_stopped_body_ends_the_download_only_when_nothing_is_missing() {
    let end = BodyEnd {
        reached: false,
        ended: true,
        chunked: false,
        total: Some(100),
        offset: 100,
        asked: 0,
        skip_left: 0,
    };
    assert!(body_end("u", end).is_ok());
    assert!(body_end(
        "u",
        BodyEnd {
            reached: true,
            ended: false,
            offset: 3,
            ..end
        }
    )
    .is_ok());
    assert!(retried(body_end("u", BodyEnd { offset: 60, ..end })).contains("byte 60 of 100"));
    assert!(retried(body_end(
        "u",
        BodyEnd {
            ended: false,
            chunked: true,
            total: None,
            ..end
        }
    ))
    .contains("before the last chunk"));
    assert!(retried(body_end(
        "u",
        BodyEnd {
            ended: false,
            total: None,
            ..end
        }
    ))
    .contains("closed at byte 100"));
    assert!(fatal(body_end("u", BodyEnd { offset: 120, ..end }))
        .to_string()
        .contains("more than the 100 bytes"));
    // Unframed and no total: the connection's end is the image's end.
    assert!(body_end("u", BodyEnd { total: None, ..end }).is_ok());
    assert!(retried(body_end(
        "u",
        BodyEnd {
            total: None,
            skip_left: 5,
            asked: 40,
            ..end
        }
    ))
    .contains("before byte 40"));
}
