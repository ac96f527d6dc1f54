package cli

import "context"

func runDemo(ctx context.Context, args []string, env Env) error { return usageErrorf("not yet") }
