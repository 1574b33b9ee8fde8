// Package strictjson decodes a JSON object into a Go struct strictly and
// reports every problem at once, each with its path, as
// "sites[2].leafnode.listen: duplicate key". It is topology's decoder: the
// package doc of topology lists what a config file may not hold, and
// topology's validation builds its paths with Field and Elem, so that
// both kinds of problem name a value alike.
//
// # Guarantees
//
//   - Decode refuses empty input, input that is not valid UTF-8, anything
//     after the top-level value, unknown keys (keys are case-sensitive; a
//     key that differs only in case gets a hint), duplicate keys at any
//     depth, null, values of the wrong JSON type, and numbers that are not
//     integers where an integer is expected or that do not fit the Go type.
//   - A type named in Options.StringTypes must be a JSON string that its
//     StringType accepts.
//   - Every problem is reported, not just the first, in input order; only
//     a syntax error stops the walk, since nothing after it can be trusted.
//   - The target is decoded only when there is no problem at all, and is
//     left unchanged otherwise.
//
// # Caveats
//
//   - The input is read twice: once token by token to find the problems,
//     then by encoding/json to decode it.
//   - The walk follows exported struct fields, maps with string keys,
//     slices and arrays, and pointers to them. A value of any other kind
//     (an interface, a channel) is skipped unchecked, and encoding/json
//     decides.
//   - Messages quote keys and offending numbers (shortened past 32
//     bytes) but never a string value, which may be a secret; the error of
//     a StringType's Check is the message as it is, so Check decides what
//     it shows.
package strictjson
