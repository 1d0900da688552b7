// Command coach-scheduler is the upstream kube-scheduler with Coach's
// plugins registered. Run it as a second scheduler (schedulerName
// coach-gang) next to the cluster's default one; see deploy/scheduler.
package main

import (
	"os"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/features"

	"github.com/coach/scheduler_plugins/pkg/colocation"
	"github.com/coach/scheduler_plugins/pkg/gang"
	"github.com/coach/scheduler_plugins/pkg/jobfifo"
)

func main() {
	// Pods that wait at the gang barrier would each cost an extra API call
	// (status.nominatedNodeName, for cluster autoscalers) before they bind;
	// for a group of n pods that is n-1 more writes. Off by default here;
	// --feature-gates=NominatedNodeNameForExpectation=true turns it back on.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{
		string(features.NominatedNodeNameForExpectation): false,
	}); err != nil {
		panic(err)
	}
	command := app.NewSchedulerCommand(
		app.WithPlugin(jobfifo.Name, jobfifo.New),
		app.WithPlugin(gang.Name, gang.New),
		app.WithPlugin(colocation.Name, colocation.New),
	)
	os.Exit(cli.Run(command))
}
