package cli_test

import "testing"

func TestRunNamesTheMissingSecretOfEveryProvider(t *testing.T) {
	t.Parallel()
	base := map[string]string{"STRIPE_API_KEY": secretStripeKey, "SENDGRID_API_KEY": "SG.x"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--providers", "rabbitmq"}, "AMQP_URL"},
		{[]string{"run", "--providers", "webhook", "--webhook", "billing=http://127.0.0.1:1/hook"}, "WEBHOOK_BILLING_SECRET"},
		{[]string{"run", "--providers", "webhook"}, "--webhook NAME=URL"},
		{[]string{"run", "--providers", "webhook", "--webhook", "Bad Name=x"}, "NAME=URL"},
		{[]string{"run", "--providers", "nats,nats"}, "twice"},
		{[]string{"run", "--providers", "fax"}, "stripe, sendgrid, nats, rabbitmq, webhook"},
	}
	for _, tc := range cases {
		r := outboxd(t, invocation{env: base, args: tc.args})
		if r.code == 0 {
			t.Errorf("%v: exit 0, want a refusal naming %s", tc.args, tc.want)
			continue
		}
		wantContains(t, "stderr", r.stderr, tc.want)
	}
}
