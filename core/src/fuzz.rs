//! Entry points for the fuzz targets in `fuzz/` (built only under `--cfg fuzzing`, which
//! cargo-fuzz sets): the parts a request reaches that are not public API.

use crate::continue_token::Tokens;

/// Decodes `token` as a continue token; one that decodes must re-encode to a token that
/// decodes to the same place.
pub fn continue_token(token: &str) {
    let tokens = Tokens::new("pods", [7; 16]);
    if let Ok(c) = tokens.decode(token) {
        let again = tokens.encode(c.revision, &c.after);
        assert_eq!(
            tokens.decode(&again),
            Ok(c),
            "a decoded token re-encodes to itself"
        );
    }
}
