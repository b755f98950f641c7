// Package rlheader reads the limits a downstream announces in the headers
// of its answers, so that shaper paces itself before it is ever refused.
//
// # Formats
//
// Parse reads every family an answer carries; each gives Limits of its
// own and Binding picks the one that constrains most:
//
//   - RateLimit (draft-ietf-httpapi-ratelimit-headers): a dictionary
//     limit=100, remaining=50, reset=30 (draft 07), or a list of items
//     "default";r=50;t=30 whose quota and window come from the
//     RateLimit-Policy item of the same name, "default";q=100;w=60
//     (draft 08 on). Items are read as structured-field items: a quoted
//     name (with \" and \\ escapes) is the whole name, whatever ; or , it
//     holds, and parameters come only after it.
//   - RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset (drafts
//     00-06).
//   - X-RateLimit-Limit, -Remaining, -Reset, -Reset-After, and the same
//     under X-Rate-Limit-: each prefix is its own Limit.
//   - Retry-After (delay seconds or an HTTP date), on any status: nothing
//     left until then.
//
// Mapping reads limits from headers named in configuration, and Profile
// gives the built-in Mappings for vendors whose headers none of the
// families above name: shopify, salesforce, hubspot, kong, atlassian and
// envoy (Profiles lists them; Profile says how each reads its vendor's
// headers). ParseWith is Parse followed by Mappings.
//
// # Rules
//
// Every Limit, from Parse or a Mapping, keeps these:
//
//   - Resets. RateLimit-Reset and X-RateLimit-Reset are delay seconds, a
//     Unix time in seconds (from 1e9, 2001) or in milliseconds (from
//     1e12), told apart by size, an RFC 3339 time with its zone
//     (2026-12-03T10:00:00Z) or an HTTP date. RateLimit's t and reset,
//     X-RateLimit-Reset-After and a Retry-After number are delay seconds.
//   - Clocks. A delay is preferred to an absolute time: with both
//     X-RateLimit-Reset-After and X-RateLimit-Reset, the delay is read, so
//     a skewed local clock does not matter. An absolute time (a Unix time,
//     an RFC 3339 time, an HTTP date) is placed on the answer's Date
//     header, the server's clock, when it has a readable one, and on now
//     otherwise.
//   - Repeats. A field sent twice or comma-folded ("5, 0") reads its
//     strictest member: the fewest remaining, the longest reset or
//     Retry-After, the smallest limit. Of a limit field only the plain
//     members count when it has any: X-RateLimit-Limit: 10, 10;w=1 is a
//     limit of 10 and its policy.
//   - Bounds. Remaining and Limit are in [0, MaxUnits], a fraction
//     rounded down; Reset and Window are in [0, sizing.MaxInterval]. A
//     number beyond them (1e300, 40 digits) is the bound, never ignored: a
//     huge wait holds for sizing.MaxInterval. What is not a decimal number
//     (words, NaN, Inf, hexadecimal) or is longer than 1024 bytes is not
//     read, nor is a field's line longer than 8 KiB or past its 16th: an
//     answer costs a bounded time to read.
//   - Remaining is at most Limit when Limit is known (above 0).
//   - Nothing left waits. A Limit with Remaining 0 has a Reset of at least
//     the time to the next whole second of now, so above 0: servers
//     truncate resets to whole seconds, and "0 left, resets in 0 s" means
//     later this second.
//   - Header names the lines a Limit was read from, for operators.
//
// Parse and Mapping.Parse never fail: a field they cannot read is left
// out. They are safe for concurrent use; Mapping.Parse does not modify the
// Mapping.
package rlheader
