// Package progress shows the count, rate and ETA of a long operation on a
// terminal, on one line that it rewrites, and nothing at all when its
// writer is not a terminal (a pipe, a file, a CI log): scripts and logs
// see only the command's own output.
//
// A Bar is safe for concurrent Add and Set; a nil *Bar does nothing, so
// callers need no checks.
package progress
