// Command outboxd records intents and dispatches them to providers exactly
// once. See 'outboxd --help'.
package main

import (
	"context"
	"os"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.OSEnv()))
}
