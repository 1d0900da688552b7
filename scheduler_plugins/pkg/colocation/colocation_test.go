package colocation_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/coach/scheduler_plugins/pkg/colocation"
	"github.com/coach/scheduler_plugins/pkg/jobs"
	"github.com/coach/scheduler_plugins/pkg/testutil"
)

func infos(t *testing.T, pods ...*v1.Pod) []fwk.PodInfo {
	out := make([]fwk.PodInfo, 0, len(pods))
	for _, p := range pods {
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pi)
	}
	return out
}

func TestRate(t *testing.T) {
	job := jobs.Key{Namespace: "default", Name: "a"}
	own := testutil.MakePod().Name("a1").Job("a", jobs.RoleWorker, 3).Obj()
	other := testutil.MakePod().Name("b1").Job("b", jobs.RoleWorker, 3).Obj()
	otherNS := testutil.MakePod().Name("a9").Job("a", jobs.RoleWorker, 3).Obj()
	otherNS.Namespace = "team2"
	plain := testutil.MakePod().Name("nginx").Obj()
	tests := []struct {
		name string
		pods []*v1.Pod
		want int64
	}{
		{"empty node", nil, colocation.ScoreEmpty},
		{"only non-Coach pods", []*v1.Pod{plain}, colocation.ScoreEmpty},
		{"same job", []*v1.Pod{own, plain}, colocation.ScoreSameJob},
		{"other job", []*v1.Pod{other}, colocation.ScoreOtherJobs},
		{"same and other job", []*v1.Pod{own, other}, colocation.ScoreOtherJobs},
		{"same job name in another namespace is another job", []*v1.Pod{otherNS}, colocation.ScoreOtherJobs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := colocation.Rate(job, infos(t, tt.pods...)); got != tt.want {
				t.Fatalf("Rate = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestPreScoreSkipsNonCoachPods(t *testing.T) {
	p := &colocation.Plugin{}
	if s := p.PreScore(t.Context(), nil, testutil.MakePod().Name("nginx").Obj(), nil); !s.IsSkip() {
		t.Fatalf("PreScore = %v, want Skip", s)
	}
	if s := p.PreScore(t.Context(), nil, testutil.MakePod().Name("w").Job("a", jobs.RoleWorker, 3).Obj(), nil); !s.IsSuccess() {
		t.Fatalf("PreScore = %v, want Success", s)
	}
}
