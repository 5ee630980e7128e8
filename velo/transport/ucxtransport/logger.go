package ucxtransport

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// followHandler is the slog.Handler behind the transport's logger when Config.Logger is not set.
// The UCX engine and context are created in New, before the transport knows which velo instance
// it belongs to, and they keep the logger they were given; this handler lets them follow the
// instance's logger (WithLogger) from Start on, without a second logger to configure. Until Start
// it writes to slog.Default().
type followHandler struct {
	target *atomic.Pointer[slog.Handler]
	attrs  []slog.Attr
	groups []string
}

func newFollowHandler() *followHandler {
	var p atomic.Pointer[slog.Handler]
	return &followHandler{target: &p}
}

// follow sends everything logged from now on to h.
func (f *followHandler) follow(h slog.Handler) { f.target.Store(&h) }

// current is the handler logged to now, with this handler's attributes and groups applied.
func (f *followHandler) current() slog.Handler {
	h := slog.Default().Handler()
	if p := f.target.Load(); p != nil {
		h = *p
	}
	for _, g := range f.groups {
		h = h.WithGroup(g)
	}
	if len(f.attrs) > 0 {
		h = h.WithAttrs(f.attrs)
	}
	return h
}

func (f *followHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return f.current().Enabled(ctx, l)
}

func (f *followHandler) Handle(ctx context.Context, r slog.Record) error {
	return f.current().Handle(ctx, r)
}

func (f *followHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *f
	c.attrs = append(append([]slog.Attr(nil), f.attrs...), attrs...)
	return &c
}

func (f *followHandler) WithGroup(name string) slog.Handler {
	c := *f
	c.groups = append(append([]string(nil), f.groups...), name)
	return &c
}
