//! Keeping secrets out of `Debug` output, error messages and logs.

/// `url` with its password replaced by `***` (`redis://user:***@host:6379/0`); the scheme,
/// user name, host, port and database stay readable. A string that is not a URL but holds
/// an `@` loses everything before it.
pub(crate) fn url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let authority_end = if scheme.is_empty() {
        rest.len()
    } else {
        rest.find(['/', '?', '#']).unwrap_or(rest.len())
    };
    let (authority, tail) = rest.split_at(authority_end);
    let tail = query(tail);
    let Some(at) = authority.rfind('@') else {
        return format!("{scheme}{authority}{tail}");
    };
    let (userinfo, host) = authority.split_at(at);
    let user = match userinfo.split_once(':') {
        Some((user, _)) if !scheme.is_empty() => format!("{user}:***"),
        _ => "***".to_owned(),
    };
    format!("{scheme}{user}{host}{tail}")
}

/// A path and query with the values of `pass=` / `password=` (Unix socket URLs) hidden.
fn query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _))
                if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
            {
                format!("{k}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", pairs.join("&"))
}

/// `Some("***")` for a set secret, for `Debug` output.
pub(crate) fn secret(s: &Option<String>) -> Option<&'static str> {
    s.as_ref().map(|_| "***")
}

#[cfg(test)]
mod tests {
    use super::url;

    #[test]
    fn passwords_are_replaced_and_the_rest_kept() {
        assert_eq!(
            url("redis://app:s3cret@db.example:6380/2"),
            "redis://app:***@db.example:6380/2"
        );
        assert_eq!(url("redis://:s3cret@h/"), "redis://:***@h/");
        assert_eq!(url("rediss://s3cret@h"), "rediss://***@h");
        assert_eq!(url("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(url("s3cret@h"), "***@h");
        assert_eq!(url("redis://u:p@ss@h"), "redis://u:***@h");
        assert_eq!(
            url("redis+unix:///run/redis.sock?db=1&pass=s3cret"),
            "redis+unix:///run/redis.sock?db=1&pass=***"
        );
    }
}
