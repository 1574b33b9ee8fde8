// Package logx holds the log/slog handler every leafline box logs through.
package logx

import (
	"context"
	"log/slog"
	"slices"
)

// Unique returns a handler that writes each top-level key at most once per
// line: when a logger's attributes (With) and a record's attributes name
// the same key, the later value wins and takes the place of the first. A
// log shipper files a JSON line by its keys, and a repeated key (a
// component's "stream" and a message's "stream") makes it file the line
// under the wrong one or refuse it. Keys inside a group (WithGroup) are
// passed on as they are.
func Unique(h slog.Handler) slog.Handler {
	if u, ok := h.(*unique); ok {
		return u
	}
	return &unique{inner: h}
}

type unique struct {
	inner slog.Handler
	// attrs are the logger's top-level attributes, each key once; they are
	// added to every record instead of being given to inner.
	attrs []slog.Attr
	// grouped: WithGroup was called; attributes now go to inner as they are.
	grouped bool
}

func (u *unique) Enabled(ctx context.Context, l slog.Level) bool { return u.inner.Enabled(ctx, l) }

func (u *unique) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return u
	}
	if u.grouped {
		return &unique{inner: u.inner.WithAttrs(as), grouped: true}
	}
	return &unique{inner: u.inner, attrs: merge(slices.Clip(u.attrs), as)}
}

func (u *unique) WithGroup(name string) slog.Handler {
	if name == "" {
		return u
	}
	inner := u.inner
	if len(u.attrs) > 0 {
		inner = inner.WithAttrs(u.attrs)
	}
	return &unique{inner: inner.WithGroup(name), grouped: true}
}

func (u *unique) Handle(ctx context.Context, r slog.Record) error {
	as := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool { as = append(as, a); return true })
	base := u.attrs
	if u.grouped {
		base = nil
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(merge(slices.Clip(base), as)...)
	return u.inner.Handle(ctx, out)
}

// merge returns base with as folded in: a key already present takes the
// later value in its first place; a new key is appended. base is not
// modified when it has no spare capacity.
func merge(base, as []slog.Attr) []slog.Attr {
	out := slices.Clone(base)
	for _, a := range as {
		if a.Key == "" && a.Value.Kind() != slog.KindGroup {
			continue // slog drops these anyway
		}
		if a.Key != "" {
			if i := slices.IndexFunc(out, func(b slog.Attr) bool { return b.Key == a.Key }); i >= 0 {
				out[i] = a
				continue
			}
		}
		out = append(out, a)
	}
	return out
}
