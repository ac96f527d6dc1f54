package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/sandbox"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// Defaults for outboxd doubles.
const (
	defaultStripeDoubleAddr   = "127.0.0.1:12111"
	defaultSendGridDoubleAddr = "127.0.0.1:12112"
)

// doublesHelp is what 'outboxd doubles --help' says the command does.
const doublesHelp = `
Serves local doubles of Stripe and SendGrid for development: the real
stripe-go and sendgrid-go clients (and so 'outboxd run') talk to them
unchanged. The Stripe double honours idempotency keys as Stripe does; the
SendGrid double keeps no idempotency, like SendGrid. Both count the effects
they performed, served as JSON at /_double/stats.

Both also answer the look-ups that 'outboxd intents show' tells an operator
to run for an in_doubt intent, so checking one at its provider can be
rehearsed locally (with the doubles' keys printed below):

  SendGrid's Email Activity API, GET /v3/messages?query=..., with the
  "search for" line of a sendgrid.email intent's 'how to check':
    curl -G -H "Authorization: Bearer SG.double-key" \
      --data-urlencode "query=unique_args['outbox_key']=\"KEY\"" \
      "$SENDGRID_API_BASE/v3/messages"
  (the double understands unique_args['NAME']="VALUE" and
  to_email="ADDRESS" joined by AND, and answers at once: SendGrid's feed
  lags by minutes);

  Stripe's search, GET /v1/payment_intents/search?query=..., with the
  "search for" line of a Stripe intent's 'how to check':
    curl -G -H "Authorization: Bearer sk_test_double" \
      --data-urlencode "query=metadata['outbox_key']:'KEY'" \
      "$STRIPE_API_BASE/v1/payment_intents/search"

With --fault-rate, that share of effect-causing requests (payments, emails)
fails the way real providers do, spread evenly over: response lost after
acting, 500 after acting, 500 before acting, 429, and a one-second delay.
--seed makes the faults repeatable.

Prints the environment to export so that 'outboxd run' uses the doubles, then
serves until SIGINT or SIGTERM (Ctrl-C), and prints what the doubles
performed. Everything lives in memory and is lost at exit.`

func runDoubles(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("doubles", "doubles [flags]", doublesHelp, env)
	stripeAddr := fs.String("stripe-addr", defaultStripeDoubleAddr, "address the Stripe double listens on (host:port; port 0 picks a free one)")
	sendgridAddr := fs.String("sendgrid-addr", defaultSendGridDoubleAddr, "address the SendGrid double listens on (host:port; port 0 picks a free one)")
	faultRate := fs.Float64("fault-rate", 0, "share of effect-causing requests that get a fault, from 0 to 1, spread evenly over the fault kinds")
	seed := fs.Uint64("seed", 1, "seed for the faults; the same seed repeats the same choices")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if *faultRate < 0 || *faultRate > 1 {
		return usageErrorf("--fault-rate must be between 0 and 1, got %g", *faultRate)
	}
	stripeFaults, sendgridFaults := fault.New(*seed), fault.New(*seed+1)
	share := *faultRate / 5
	rates := fault.Rates{LoseResponse: share, ErrorAfter: share, ErrorBefore: share, RateLimit: share, Delay: share,
		DelayFor: time.Second, RetryAfter: time.Second}
	for _, f := range []*fault.Injector{stripeFaults, sendgridFaults} {
		if err := f.SetRates(rates); err != nil {
			return usageErrorf("--fault-rate: %v", err)
		}
	}

	ctx, stop := stopOnSignal(ctx, env)
	defer stop()
	sb, err := sandbox.Start(&sandbox.Config{StripeAddr: *stripeAddr, SendGridAddr: *sendgridAddr, StripeFaults: stripeFaults, SendGridFaults: sendgridFaults})
	var de *sandbox.DoubleError
	if errors.As(err, &de) {
		return fmt.Errorf("%s: %w", addrFlag[de.Double], de.Err)
	}
	if err != nil {
		return err
	}
	stripe, sendgrid := sb.Stripe(), sb.SendGrid()

	fmt.Fprintf(env.Stdout, `Stripe double    %[1]s   (stats: %[1]s/_double/stats)
SendGrid double  %[2]s   (stats: %[2]s/_double/stats)
Faults           %[3]g of payments and emails (seed %[4]d)

To use them, export:
  export STRIPE_API_BASE=%[1]s
  export STRIPE_API_KEY=%[5]s
  export SENDGRID_API_BASE=%[2]s
  export SENDGRID_API_KEY=%[6]s

Serving until SIGINT or SIGTERM.
`, stripe.URL(), sendgrid.URL(), *faultRate, *seed, stripedouble.DefaultAPIKey, sendgriddouble.DefaultAPIKey)

	<-ctx.Done()
	if err := sb.Close(); err != nil {
		return err
	}
	st, sg := stripe.Stats(), sendgrid.Stats()
	fmt.Fprintf(env.Stdout, "Stopped. Stripe double: %d PaymentIntents, %d replays, %d duplicate effects. SendGrid double: %d emails.\n",
		st.PaymentIntents, st.Replays, st.DuplicateEffects, sg.Emails)
	return nil
}

// addrFlag is the flag that sets each double's address.
var addrFlag = map[string]string{sandbox.Stripe: "--stripe-addr", sandbox.SendGrid: "--sendgrid-addr"}
