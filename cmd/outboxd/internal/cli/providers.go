package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/secret"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/amqpprovider"
	"github.com/outboxkit/outbox/providers/jetstreamprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider"
)

// knownProviders is what --providers accepts.
const knownProviders = "stripe, sendgrid, nats, rabbitmq, webhook"

// DefaultNATSURL is the NATS server when neither --nats-url nor NATS_URL is
// set.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// providerFlags configures the provider adapters. Secrets are never flags:
// STRIPE_API_KEY, SENDGRID_API_KEY, AMQP_URL (it holds a password) and
// WEBHOOK_<NAME>_SECRET come from the environment or their _FILE variants.
type providerFlags struct {
	enabled           string
	stripeBase        string
	sendgridBase      string
	sendgridReconcile bool
	natsURL           string
	natsStream        string
	natsKeyWindow     time.Duration
	webhooks          webhookEndpoints
	webhookHeader     string
	webhookKeyWindow  time.Duration
	webhookTimeout    time.Duration

	closers []func()
}

// webhookEndpoints is a repeatable NAME=URL flag.
type webhookEndpoints map[string]string

var webhookNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

func (w *webhookEndpoints) String() string {
	names := make([]string, 0, len(*w))
	for n := range *w {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func (w *webhookEndpoints) Set(v string) error {
	name, url, ok := strings.Cut(v, "=")
	if !ok || !webhookNamePattern.MatchString(name) || url == "" {
		return fmt.Errorf("want NAME=URL with NAME in lower case letters, digits and '_', got %q", v)
	}
	if *w == nil {
		*w = webhookEndpoints{}
	}
	if _, dup := (*w)[name]; dup {
		return fmt.Errorf("endpoint %q given twice", name)
	}
	(*w)[name] = url
	return nil
}

// registerForRecording registers the provider flags that change what
// recording accepts: which kinds, the webhook endpoints a payload may
// name, and where the nats provider connects. The others (base URLs,
// reconciliation, key windows, timeouts) only matter to a dispatcher.
func (p *providerFlags) registerForRecording(fs *flag.FlagSet, env Env) {
	fs.StringVar(&p.enabled, "providers", "stripe,sendgrid", "comma-separated providers whose intent kinds are accepted (each payload is validated by its provider; nothing is called): "+knownProviders)
	fs.StringVar(&p.natsURL, "nats-url", envOr(env, "NATS_URL", DefaultNATSURL), "NATS server the nats provider connects to, with --providers nats (env NATS_URL)")
	fs.Var(&p.webhooks, "webhook", "a webhook endpoint NAME=URL (repeatable) that webhook.post payloads may name, with --providers webhook; its URL is not called when recording")
	p.webhookTimeout = webhookprovider.DefaultTimeout
}

func envOr(env Env, name, def string) string {
	if v := env.Getenv(name); v != "" {
		return v
	}
	return def
}

func (p *providerFlags) register(fs *flag.FlagSet, env Env) {
	fs.StringVar(&p.enabled, "providers", "stripe,sendgrid", "comma-separated providers whose intent kinds are accepted and performed: "+knownProviders)
	stripeBase := env.Getenv("STRIPE_API_BASE")
	if stripeBase == "" {
		stripeBase = stripeprovider.DefaultBaseURL
	}
	sendgridBase := env.Getenv("SENDGRID_API_BASE")
	if sendgridBase == "" {
		sendgridBase = sendgridprovider.DefaultBaseURL
	}
	natsURL := env.Getenv("NATS_URL")
	if natsURL == "" {
		natsURL = DefaultNATSURL
	}
	fs.StringVar(&p.stripeBase, "stripe-api-base", stripeBase, "Stripe API base URL (env STRIPE_API_BASE)")
	fs.StringVar(&p.sendgridBase, "sendgrid-api-base", sendgridBase, "SendGrid API base URL (env SENDGRID_API_BASE)")
	fs.BoolVar(&p.sendgridReconcile, "sendgrid-reconcile", false, "look ambiguous sends up in SendGrid's Email Activity API (a paid add-on); without it they are held in_doubt")
	fs.StringVar(&p.natsURL, "nats-url", natsURL, "NATS server for the nats provider (env NATS_URL)")
	fs.StringVar(&p.natsStream, "nats-stream", "", "JetStream stream the nats provider publishes to; its duplicate window is the key window")
	fs.DurationVar(&p.natsKeyWindow, "nats-key-window", 0, "assert a key window for the nats provider instead of reading --nats-stream's")
	fs.Var(&p.webhooks, "webhook", "a webhook endpoint NAME=URL (repeatable); its signing secret comes from WEBHOOK_<NAME>_SECRET")
	fs.StringVar(&p.webhookHeader, "webhook-idempotency-header", "", "header carrying the idempotency key to webhook receivers that honour one (e.g. Idempotency-Key); empty: receivers have no idempotency")
	fs.DurationVar(&p.webhookKeyWindow, "webhook-key-window", 24*time.Hour, "how long webhook receivers remember a key (with --webhook-idempotency-header)")
	fs.DurationVar(&p.webhookTimeout, "webhook-timeout", webhookprovider.DefaultTimeout, "timeout of one webhook delivery")
}

// registry builds the enabled adapters. With needKeys (the dispatcher), an
// enabled provider without credentials is an error naming the variable to
// set; without it (recording only validates payloads) credentials are
// optional. Call close when done: some providers hold connections.
func (p *providerFlags) registry(ctx context.Context, env Env, needKeys bool, client *http.Client, logger *slog.Logger) (*providers.Registry, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var list []providers.Provider
	var missing []string
	seen := map[string]bool{}
	for _, name := range strings.Split(p.enabled, ",") {
		name = strings.TrimSpace(name)
		if seen[name] {
			p.close()
			return nil, usageErrorf("--providers lists %q twice", name)
		}
		seen[name] = true
		prov, err := p.build(ctx, env, name, needKeys, client, logger)
		var ce *credentialError
		if errors.As(err, &ce) {
			// Every missing credential is reported at once, not one per try.
			missing = append(missing, ce.problems...)
			continue
		}
		if err != nil {
			p.close()
			return nil, err
		}
		list = append(list, prov)
	}
	if len(missing) > 0 {
		p.close()
		return nil, fmt.Errorf("refusing to start: %s", strings.Join(missing, "; "))
	}
	return providers.NewRegistry(list...)
}

// credentialError lists the credentials a provider lacks.
type credentialError struct{ problems []string }

func (e *credentialError) Error() string { return strings.Join(e.problems, "; ") }

// build builds the adapter of the provider named name.
func (p *providerFlags) build(ctx context.Context, env Env, name string, needKeys bool, client *http.Client, logger *slog.Logger) (providers.Provider, error) {
	switch name {
	case stripeprovider.Name:
		return p.buildStripe(env, needKeys, client)
	case sendgridprovider.Name:
		return p.buildSendGrid(env, needKeys, client)
	case jetstreamprovider.Name:
		return p.buildNATS(ctx, needKeys, logger)
	case amqpprovider.Name:
		return p.buildRabbitMQ(env, needKeys, logger)
	case webhookprovider.Name:
		return p.buildWebhook(env, needKeys, client)
	case "":
		return nil, usageErrorf("--providers is empty: name at least one of %s", knownProviders)
	}
	return nil, usageErrorf("--providers: unknown provider %q (known: %s)", name, knownProviders)
}

func (p *providerFlags) buildStripe(env Env, needKeys bool, client *http.Client) (providers.Provider, error) {
	key, err := loadKey(env, "STRIPE_API_KEY", needKeys)
	if err != nil {
		return nil, err
	}
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: key, BaseURL: p.stripeBase, HTTPClient: client})
	if err != nil {
		return nil, usageErrorf("--stripe-api-base: %v", err)
	}
	return sp, nil
}

func (p *providerFlags) buildSendGrid(env Env, needKeys bool, client *http.Client) (providers.Provider, error) {
	key, err := loadKey(env, "SENDGRID_API_KEY", needKeys)
	if err != nil {
		return nil, err
	}
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: key, BaseURL: p.sendgridBase, HTTPClient: client, Reconcile: p.sendgridReconcile})
	if err != nil {
		return nil, usageErrorf("--sendgrid-api-base: %v", err)
	}
	return gp, nil
}

// buildNATS builds the nats adapter. Only the dispatcher names the stream:
// reading its key window needs the server, and recording only validates
// payloads.
func (p *providerFlags) buildNATS(ctx context.Context, needKeys bool, logger *slog.Logger) (providers.Provider, error) {
	cfg := jetstreamprovider.Config{URL: p.natsURL, Logger: logger.With("provider", "nats")}
	if needKeys {
		cfg.Stream, cfg.KeyWindow = p.natsStream, p.natsKeyWindow
	}
	np, err := jetstreamprovider.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("nats provider: %w", err)
	}
	p.closers = append(p.closers, np.Close)
	return np, nil
}

func (p *providerFlags) buildRabbitMQ(env Env, needKeys bool, logger *slog.Logger) (providers.Provider, error) {
	url, err := loadKey(env, "AMQP_URL", needKeys)
	if err != nil {
		return nil, err
	}
	ap, err := amqpprovider.New(amqpprovider.Config{URL: url, Logger: logger.With("provider", "rabbitmq")})
	if err != nil {
		return nil, fmt.Errorf("rabbitmq provider: %w", err)
	}
	p.closers = append(p.closers, func() { _ = ap.Close() })
	return ap, nil
}

// buildWebhook builds one endpoint per --webhook, each with its secret;
// every missing secret is reported at once.
func (p *providerFlags) buildWebhook(env Env, needKeys bool, client *http.Client) (providers.Provider, error) {
	if len(p.webhooks) == 0 {
		return nil, usageErrorf("the webhook provider needs at least one --webhook NAME=URL")
	}
	cfg := webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{}, HTTPClient: client}
	var missing credentialError
	for _, endpoint := range slices.Sorted(maps.Keys(p.webhooks)) {
		variable := "WEBHOOK_" + strings.ToUpper(endpoint) + "_SECRET"
		secretValue, err := secret.LoadFrom(env.Getenv, variable)
		if err != nil {
			if needKeys {
				missing.problems = append(missing.problems, err.Error())
				continue
			}
			secretValue = "validation-only-placeholder-secret"
		}
		ep := webhookprovider.Endpoint{URL: p.webhooks[endpoint], Secret: secretValue, Timeout: p.webhookTimeout}
		if p.webhookHeader != "" {
			ep.IdempotencyHeader, ep.KeyWindow = p.webhookHeader, p.webhookKeyWindow
		}
		cfg.Endpoints[endpoint] = ep
	}
	if len(missing.problems) > 0 {
		return nil, &missing
	}
	wp, err := webhookprovider.New(cfg)
	if err != nil {
		return nil, usageErrorf("--webhook: %v", err)
	}
	return wp, nil
}

// providerOfKind is the provider that performs each built-in kind.
var providerOfKind = map[string]string{
	stripeprovider.KindPaymentIntent: stripeprovider.Name,
	stripeprovider.KindRefund:        stripeprovider.Name,
	stripeprovider.KindCapture:       stripeprovider.Name,
	stripeprovider.KindCancel:        stripeprovider.Name,
	sendgridprovider.KindEmail:       sendgridprovider.Name,
	jetstreamprovider.KindPublish:    jetstreamprovider.Name,
	amqpprovider.KindPublish:         amqpprovider.Name,
	webhookprovider.KindPost:         webhookprovider.Name,
}

// unknownKindHint says what to do about a kind no enabled provider
// performs: the kind of a provider --providers leaves out names the flag
// that enables it; a kind no provider knows, the built-in kind it may be a
// typo of.
func (p *providerFlags) unknownKindHint(kind string) string {
	if _, ok := providerOfKind[kind]; ok {
		return p.enableHint(kind)
	}
	m := closest(kind, slices.Collect(maps.Keys(providerOfKind)))
	if m == "" {
		return ""
	}
	hint := fmt.Sprintf("did you mean %q?", m)
	if enabled := strings.Split(strings.ReplaceAll(p.enabled, " ", ""), ","); !slices.Contains(enabled, providerOfKind[m]) {
		hint += " " + p.enableHint(m)
	}
	return hint
}

// enableHint names the flag that enables the provider of kind.
func (p *providerFlags) enableHint(kind string) string {
	name := providerOfKind[kind]
	enabled := strings.Join(strings.Fields(strings.ReplaceAll(p.enabled, ",", " ")), ",")
	hint := fmt.Sprintf("%s is the %s provider's, which --providers does not enable: add it (--providers %s,%s)", kind, name, enabled, name)
	if name == webhookprovider.Name {
		hint += " with the endpoints as --webhook NAME=URL"
	}
	return hint
}

// close releases the providers' connections.
func (p *providerFlags) close() {
	for _, c := range p.closers {
		c()
	}
	p.closers = nil
}

func loadKey(env Env, name string, required bool) (string, error) {
	key, err := secret.LoadFrom(env.Getenv, name)
	if err != nil && required {
		return "", &credentialError{problems: []string{err.Error()}}
	}
	return key, nil
}
