package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
	"github.com/sluice-dev/sluice/internal/convert/envoyratelimit"
	"github.com/sluice-dev/sluice/internal/convert/ingressnginx"
)

const convertUsage = `usage: manager convert envoy-ratelimit [flags] FILE...

Converts envoyproxy/ratelimit configuration files (domain, nested descriptors,
rate_limit, unlimited, shadow_mode, quota_mode, replaces, detailed_metric,
share_threshold, ...) into RateLimitPolicy YAML on standard output, one
descriptor policy per limited descriptor. The files are read together, as the
service loads its configuration folder. Reports go to standard error as
FILE:LINE: SEVERITY: MESSAGE:

  error    envoyproxy/ratelimit would refuse the configuration; nothing is written
  inexact  Sluice would decide some requests differently (the message says how)
  note     carried over exactly as far as decisions go (statistics, ignored keys)

Exit status: 0 when every decision carries over (notes only); 1 otherwise: on
an error, on bad usage, and on an inexact conversion, when nothing is written
unless --allow-partial. Bind each domain to the namespace on the check process:
--rls-domain DOMAIN=NAMESPACE. The policies assume they are the only descriptor
policies of their domains in that namespace.

flags:
`

func runConvert(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, "usage: manager convert envoy-ratelimit [flags] FILE...\n       manager convert ingress-nginx [flags] FILE...|-\n\nRun 'manager convert FORMAT -h' for what each does and its flags.\n")
		if len(args) == 0 {
			return errors.New("name the input format: envoy-ratelimit or ingress-nginx")
		}
		return flag.ErrHelp
	}
	var cmd *convert.Command
	switch args[0] {
	case "envoy-ratelimit":
		cmd = envoyCommand()
	case "ingress-nginx":
		cmd = ingressCommand()
	default:
		return fmt.Errorf("unknown input format %q; the formats are envoy-ratelimit and ingress-nginx", args[0])
	}
	return cmd.Run(args[1:], os.Stdin, os.Stdout, os.Stderr)
}

// envoyCommand is `manager convert envoy-ratelimit`.
func envoyCommand() *convert.Command {
	var opts envoyratelimit.Options
	return &convert.Command{
		Name:  "convert envoy-ratelimit",
		Usage: convertUsage,
		Flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&opts.Namespace, "namespace", "default", "namespace of the policies (bind their domains to it with --rls-domain DOMAIN=NAMESPACE)")
			failureMode := fs.String("failure-mode", string(ratelimitv1alpha1.FailureModeOpen), "failureMode of the policies: Open, as Envoy's rate limit filter allows when the service fails (failure_mode_deny: false), or Closed for filters with failure_mode_deny: true")
			fs.BoolVar(&opts.MergeDomains, "merge-domains", false, "accept a domain in several files, merging their descriptors (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true)")
			return func() (err error) {
				opts.FailureMode, err = convert.ParseFailureMode(*failureMode, false)
				return err
			}
		},
		AllowPartial:   "write the policies and exit 0 even when some decisions cannot be carried over exactly (errors still write nothing)",
		NoFiles:        "no configuration files given",
		ErrorsRefused:  "nothing written: envoyproxy/ratelimit would refuse this configuration",
		PartialRefused: "nothing written: some decisions cannot be carried over exactly (see above); --allow-partial writes the policies anyway",
		Convert: func(files []convert.File) convert.Outcome {
			res := envoyratelimit.Convert(files, opts)
			bind := make([]string, len(res.Domains))
			for i, d := range res.Domains {
				bind[i] = "--rls-domain " + d + "=" + opts.Namespace
			}
			return convert.Outcome{
				Reports: reportLines(res.Reports),
				Worst:   res.Worst(),
				Write:   func(w io.Writer) error { return convert.WriteYAML(w, res.Policies) },
				Summary: fmt.Sprintf("manager convert: %d policies in namespace %s; the check process needs %s", len(res.Policies), opts.Namespace, strings.Join(bind, " ")),
			}
		},
	}
}

const convertIngressUsage = `usage: manager convert ingress-nginx [flags] FILE...|-

Converts the rate limits of ingress-nginx Ingress manifests (files, or - for
standard input: kubectl get ingress -A -o yaml | manager convert ingress-nginx -)
into RateLimitPolicy YAML on standard output, one policy per rate-limited
Ingress, deciding as nginx's limit_req did: limit-rps and limit-rpm with
limit-burst-multiplier become gcra limits per client address, limit-whitelist
(limit-allowlist) exempt client networks, the Ingress's hosts and paths the
match. Above each policy, a comment gives the auth-url annotation that makes
ingress-nginx ask Sluice (kubectl annotate ... with the annotations the policy
replaces removed), and how to attach the policy to the Ingress's successor
HTTPRoute instead. Reports go to standard error as
FILE:LINE: INGRESS: annotation NAME: SEVERITY: MESSAGE:

  error    ingress-nginx refuses the Ingress (or nginx its limits); no policy for it
  inexact  not convertible, or converted differently (limit-connections,
           limit-rate, limit-rate-after, ...); the message says what happens
  note     carried over exactly as far as decisions go

Exit status: 0 when every limit carries over (notes only); 1 otherwise, and
then nothing is written unless --allow-partial, which writes the policies of
every Ingress that converts (none for an Ingress with an error).

flags:
`

// ingressCommand is `manager convert ingress-nginx`.
func ingressCommand() *convert.Command {
	var opts ingressnginx.Options
	return &convert.Command{
		Name:  "convert ingress-nginx",
		Usage: convertIngressUsage,
		Flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&opts.Namespace, "namespace", "", "namespace of the policies of Ingresses whose manifests name none (default: none, so that kubectl apply -n decides, as for the Ingress)")
			fromIngress := fs.Bool("namespace-from-ingress", true, "put each policy in its Ingress's namespace; false puts every policy in --namespace, and the auth-url then names it")
			fs.StringVar(&opts.AnnotationsPrefix, "annotations-prefix", ingressnginx.DefaultAnnotationsPrefix, "ingress-nginx's --annotations-prefix")
			fs.StringVar(&opts.CheckURL, "check-url", ingressnginx.DefaultCheckURL, "the check endpoint's base URL, for the auth-url annotation")
			failureMode := fs.String("failure-mode", "", "failureMode of the policies: Open or Closed (default: unset, the API's Open)")
			return func() (err error) {
				opts.IgnoreIngressNamespace = !*fromIngress
				if opts.IgnoreIngressNamespace && opts.Namespace == "" {
					return errors.New("--namespace-from-ingress=false needs --namespace")
				}
				opts.FailureMode, err = convert.ParseFailureMode(*failureMode, true)
				return err
			}
		},
		AllowPartial:   "write the policies and exit 0 even when something cannot be converted (an Ingress with an error gets no policy)",
		NoFiles:        "no Ingress manifests given (name files, or - for standard input)",
		Stdin:          true,
		PartialRefused: "nothing written: some Ingresses cannot be converted exactly, or at all (see above); --allow-partial writes the policies of those that convert",
		Convert: func(files []convert.File) convert.Outcome {
			res := ingressnginx.Convert(files, opts)
			return convert.Outcome{
				Reports: reportLines(res.Reports),
				Worst:   res.Worst(),
				Write:   func(w io.Writer) error { return convert.WriteYAML(w, res.Policies) },
				Summary: fmt.Sprintf("manager convert: %d Ingresses read, %d policies written. Through auth-url, Sluice's denials reach clients as 403 "+
					"(nginx answered limit_req's with the ConfigMap's limit-req-status-code, 503 by default); "+
					"config/examples/ingress-nginx/ingress-429.yaml answers 429 instead, or any status its snippet returns.", res.Ingresses, len(res.Policies)),
			}
		},
	}
}

// reportLines prints each report as the converters format it.
func reportLines[R fmt.Stringer](reports []R) []string {
	out := make([]string, len(reports))
	for i, r := range reports {
		out[i] = r.String()
	}
	return out
}
