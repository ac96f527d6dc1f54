package cli

import (
	"flag"
	"fmt"
	"net/http"
	"strings"

	"github.com/outboxkit/outbox/internal/secret"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// providerFlags configures the provider adapters. API keys are never flags:
// they come from STRIPE_API_KEY / SENDGRID_API_KEY or their _FILE variants.
type providerFlags struct {
	enabled           string
	stripeBase        string
	sendgridBase      string
	sendgridReconcile bool
}

func (p *providerFlags) register(fs *flag.FlagSet, env Env, withEnabled bool) {
	if withEnabled {
		fs.StringVar(&p.enabled, "providers", "stripe,sendgrid", "comma-separated providers to run; each needs its API key in the environment")
	} else {
		p.enabled = "stripe,sendgrid"
	}
	stripeBase := env.Getenv("STRIPE_API_BASE")
	if stripeBase == "" {
		stripeBase = stripeprovider.DefaultBaseURL
	}
	sendgridBase := env.Getenv("SENDGRID_API_BASE")
	if sendgridBase == "" {
		sendgridBase = sendgridprovider.DefaultBaseURL
	}
	fs.StringVar(&p.stripeBase, "stripe-api-base", stripeBase, "Stripe API base URL (env STRIPE_API_BASE)")
	fs.StringVar(&p.sendgridBase, "sendgrid-api-base", sendgridBase, "SendGrid API base URL (env SENDGRID_API_BASE)")
	fs.BoolVar(&p.sendgridReconcile, "sendgrid-reconcile", false, "look ambiguous sends up in SendGrid's Email Activity API (a paid add-on); without it they are held in_doubt")
}

// registry builds the enabled adapters. With needKeys, an enabled provider
// without credentials is an error naming the variable to set; without it
// (recording only validates payloads) keys are optional.
func (p *providerFlags) registry(env Env, needKeys bool, client *http.Client) (*providers.Registry, error) {
	var list []providers.Provider
	seen := map[string]bool{}
	for _, name := range strings.Split(p.enabled, ",") {
		name = strings.TrimSpace(name)
		if seen[name] {
			return nil, usageErrorf("--providers lists %q twice", name)
		}
		seen[name] = true
		switch name {
		case stripeprovider.Name:
			key, err := loadKey(env, "STRIPE_API_KEY", needKeys)
			if err != nil {
				return nil, err
			}
			sp, err := stripeprovider.New(stripeprovider.Config{APIKey: key, BaseURL: p.stripeBase, HTTPClient: client})
			if err != nil {
				return nil, usageErrorf("--stripe-api-base: %v", err)
			}
			list = append(list, sp)
		case sendgridprovider.Name:
			key, err := loadKey(env, "SENDGRID_API_KEY", needKeys)
			if err != nil {
				return nil, err
			}
			gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: key, BaseURL: p.sendgridBase, HTTPClient: client, Reconcile: p.sendgridReconcile})
			if err != nil {
				return nil, usageErrorf("--sendgrid-api-base: %v", err)
			}
			list = append(list, gp)
		case "":
			return nil, usageErrorf("--providers is empty: name at least one of stripe, sendgrid")
		default:
			return nil, usageErrorf("--providers: unknown provider %q (known: stripe, sendgrid)", name)
		}
	}
	return providers.NewRegistry(list...)
}

func loadKey(env Env, name string, required bool) (string, error) {
	key, err := secret.LoadFrom(env.Getenv, name)
	if err != nil && required {
		return "", fmt.Errorf("refusing to start: %w", err)
	}
	return key, nil
}
