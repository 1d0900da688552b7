// Command coach-scheduler is the upstream kube-scheduler with Coach's
// plugins registered. Run it as a second scheduler (schedulerName
// coach-gang) next to the cluster's default one; see deploy/scheduler.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/coach/scheduler_plugins/pkg/colocation"
	"github.com/coach/scheduler_plugins/pkg/gang"
	"github.com/coach/scheduler_plugins/pkg/jobfifo"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(jobfifo.Name, jobfifo.New),
		app.WithPlugin(gang.Name, gang.New),
		app.WithPlugin(colocation.Name, colocation.New),
	)
	os.Exit(cli.Run(command))
}
