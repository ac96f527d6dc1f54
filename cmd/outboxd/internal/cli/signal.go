package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// stopOnSignal is signal.NotifyContext for a command that stops
// gracefully: the first SIGINT or SIGTERM cancels the context it returns,
// and says on stderr that the command is stopping and that a second one
// exits at once; the second exits the process at once, with 128 plus the
// signal's number (130 for Ctrl-C), whatever the graceful stop is still
// waiting for (attempts in flight, a scratch database to drop). Call stop
// when the command is done, to restore the default handling.
func stopOnSignal(ctx context.Context, env Env) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var first os.Signal
		for {
			select {
			case <-done:
				return
			case sig := <-signals:
				if first == nil {
					first = sig
					fmt.Fprintf(env.Stderr, "outboxd: stopping gracefully (%s again to exit at once)\n", signalName(sig))
					cancel()
					continue
				}
				fmt.Fprintf(env.Stderr, "outboxd: %s again: exiting at once, without waiting for the graceful stop\n", signalName(sig))
				code := 1
				if s, ok := sig.(syscall.Signal); ok {
					code = 128 + int(s)
				}
				os.Exit(code)
			}
		}
	}()
	return ctx, func() {
		signal.Stop(signals)
		close(done)
		cancel()
	}
}

// signalName is what the user sent: Ctrl-C for SIGINT.
func signalName(sig os.Signal) string {
	if sig == syscall.SIGINT {
		return "Ctrl-C"
	}
	if s, ok := sig.(syscall.Signal); ok && s == syscall.SIGTERM {
		return "SIGTERM"
	}
	return sig.String()
}
