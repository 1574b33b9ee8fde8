package record

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendCompletion appends c as json.Marshal encodes it, byte for byte
// (TestAppendCompletion_SameAsMarshal), without reflection: the completion
// state encodes every record it changes.
func appendCompletion(b []byte, c *Completion) []byte {
	b = append(b, `{"event_id":`...)
	b = appendJSONString(b, c.EventID)
	b = append(b, `,"origin_stream":`...)
	b = appendJSONString(b, c.OriginStream)
	if c.Subject != "" {
		b = append(b, `,"subject":`...)
		b = appendJSONString(b, c.Subject)
	}
	if c.OriginSeq != 0 {
		b = append(b, `,"origin_seq":`...)
		b = strconv.AppendUint(b, c.OriginSeq, 10)
	}
	if !c.PublishedAt.IsZero() {
		b = append(b, `,"published_at":`...)
		b = appendJSONTime(b, c.PublishedAt)
	}
	if len(c.Expected) > 0 {
		b = append(b, `,"expected":`...)
		b = appendStrings(b, c.Expected)
	}
	b = append(b, `,"processors":`...)
	b = appendProcessors(b, c.Processors)
	if len(c.Held) > 0 {
		b = append(b, `,"held":`...)
		b = appendProcessors(b, c.Held)
	}
	if len(c.Unexpected) > 0 {
		b = append(b, `,"unexpected":`...)
		b = appendProcessors(b, c.Unexpected)
	}
	if c.PayloadSHA256 != "" {
		b = append(b, `,"payload_sha256":`...)
		b = appendJSONString(b, c.PayloadSHA256)
	}
	if len(c.Reused) > 0 {
		b = appendReused(b, c.Reused)
	}
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(c.Status))
	if c.Conflict {
		b = append(b, `,"conflict":true`...)
	}
	b = append(b, `,"updated_at":`...)
	b = appendJSONTime(b, c.UpdatedAt)
	if len(c.Missing) > 0 {
		b = append(b, `,"missing":`...)
		b = appendStrings(b, c.Missing)
	}
	if c.Overdue {
		b = append(b, `,"overdue":true`...)
	}
	if a := c.Cleaned; a != nil {
		b = appendCleaned(b, a)
	}
	return append(b, '}')
}

// appendReused appends the "reused" member: a JSON array of rs.
func appendReused(b []byte, rs []OriginReuse) []byte {
	b = append(b, `,"reused":[`...)
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"seq":`...)
		b = strconv.AppendUint(b, r.Seq, 10)
		b = append(b, `,"subject":`...)
		b = appendJSONString(b, r.Subject)
		b = append(b, `,"published_at":`...)
		b = appendJSONTime(b, r.PublishedAt)
		b = append(b, `,"payload_sha256":`...)
		b = appendJSONString(b, r.PayloadSHA256)
		b = append(b, '}')
	}
	b = append(b, ']')
	return b
}

// appendCleaned appends the "cleaned" member: a JSON object of a.
func appendCleaned(b []byte, a *AuditRef) []byte {
	b = append(b, `,"cleaned":{"audit_stream":`...)
	b = appendJSONString(b, a.Stream)
	b = append(b, `,"audit_seq":`...)
	b = strconv.AppendUint(b, a.Seq, 10)
	b = append(b, `,"audit_subject":`...)
	b = appendJSONString(b, a.Subject)
	b = append(b, `,"deleted_by":`...)
	b = appendJSONString(b, a.DeletedBy)
	b = append(b, `,"decided_at":`...)
	b = appendJSONTime(b, a.DecidedAt)
	b = append(b, '}')
	return b
}

func appendProcessors(b []byte, m map[string]ProcessorRecord) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		p := m[k]
		b = appendJSONString(b, k)
		b = append(b, `:{"status":`...)
		b = appendJSONString(b, string(p.Status))
		b = append(b, `,"site":`...)
		b = appendJSONString(b, p.Site)
		b = append(b, `,"receipt_id":`...)
		b = appendJSONString(b, p.ReceiptID)
		b = append(b, `,"processed_at":`...)
		b = appendJSONTime(b, p.ProcessedAt)
		b = append(b, `,"received_at":`...)
		b = appendJSONTime(b, p.ReceivedAt)
		b = append(b, `,"duplicates":`...)
		b = strconv.AppendInt(b, int64(p.Duplicates), 10)
		b = append(b, `,"conflicts":`...)
		b = strconv.AppendInt(b, int64(p.Conflicts), 10)
		if p.Reason != "" {
			b = append(b, `,"reason":`...)
			b = appendJSONString(b, p.Reason)
		}
		if p.Verified {
			b = append(b, `,"verified":true`...)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONTime appends t as time.Time.MarshalJSON does.
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json does by default:
// HTML characters escaped, invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
