package redact

import (
	"context"
	"log/slog"
	"slices"
)

// Handler returns a slog.Handler that passes every record to h with the
// string values of the attributes named in names (at any depth of groups)
// replaced by their Hash: "key" and "principal" keep a request's log lines
// matchable with each other and with `idemkit store inflight` without
// showing an idempotency key or an account.
func Handler(h slog.Handler, names ...string) slog.Handler {
	return &handler{h: h, names: names}
}

type handler struct {
	h     slog.Handler
	names []string
}

func (r *handler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, rec.Message, rec.PC)
	// The attributes are added in one call: the record grows its storage
	// once, not once per attribute beyond the first five.
	var buf [16]slog.Attr
	attrs := buf[:0]
	rec.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, r.redact(a))
		return true
	})
	out.AddAttrs(attrs...)
	return r.h.Handle(ctx, out)
}

func (r *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = r.redact(a)
	}
	return &handler{h: r.h.WithAttrs(red), names: r.names}
}

func (r *handler) WithGroup(name string) slog.Handler {
	return &handler{h: r.h.WithGroup(name), names: r.names}
}

// redact hashes a, or the attributes of the group a, by name.
func (r *handler) redact(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch {
	case v.Kind() == slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, len(g))
		for i, x := range g {
			red[i] = r.redact(x)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(red...)}
	case v.Kind() == slog.KindString && slices.Contains(r.names, a.Key):
		return slog.String(a.Key, Hash(v.String()))
	}
	return slog.Attr{Key: a.Key, Value: v}
}
