package cli

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
)

// riverInfoAsDebug returns a logger that writes what l writes, except that
// records River itself logs at INFO go out at DEBUG: River reports routine
// work at INFO (its producer's job counts every few seconds, each
// maintenance pass), which would bury the outbox's own lines. Records are
// told apart by the function that logged them, so the dispatcher's INFO
// lines, logged through the same logger, stay INFO.
func riverInfoAsDebug(l *slog.Logger) *slog.Logger {
	return slog.New(riverLevelHandler{l.Handler()})
}

type riverLevelHandler struct{ next slog.Handler }

func (h riverLevelHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h riverLevelHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && loggedByRiver(r.PC) {
		if !h.next.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.next.Handle(ctx, r)
}

func (h riverLevelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return riverLevelHandler{h.next.WithAttrs(attrs)}
}

func (h riverLevelHandler) WithGroup(name string) slog.Handler {
	return riverLevelHandler{h.next.WithGroup(name)}
}

// riverPackage prefixes the functions of River and its submodules.
const riverPackage = "github.com/riverqueue/river"

// loggedByRiver reports whether the log call at pc is in River's code.
func loggedByRiver(pc uintptr) bool {
	if pc == 0 {
		return false
	}
	frame, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	return strings.HasPrefix(frame.Function, riverPackage+".") || strings.HasPrefix(frame.Function, riverPackage+"/")
}
