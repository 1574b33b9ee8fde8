package receipt

import "unicode/utf8"

// TruncateUTF8 cuts s to at most n bytes on a rune boundary and replaces
// invalid UTF-8, so the result is always a valid, bounded string.
func TruncateUTF8(s string, n int) string {
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // replaces invalid bytes with U+FFFD
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
