package jobfifo_test

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/coach/scheduler_plugins/pkg/jobfifo"
	"github.com/coach/scheduler_plugins/pkg/jobs"
	"github.com/coach/scheduler_plugins/pkg/testutil"
)

func qp(t *testing.T, p *v1.Pod) *framework.QueuedPodInfo {
	pi, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return &framework.QueuedPodInfo{PodInfo: pi}
}

func TestLess(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name   string
		seen   []*v1.Pod // observed by the registry in this order
		p1, p2 *v1.Pod
		want   bool
	}{
		{
			name: "older job first even if its pod is newer",
			seen: []*v1.Pod{testutil.MakePod().Name("a0").Job("a", jobs.RoleScheduler, 3).Created(t0).Obj()},
			p1:   testutil.MakePod().Name("a1").Job("a", jobs.RoleWorker, 3).Created(t0.Add(10 * time.Second)).Obj(),
			p2:   testutil.MakePod().Name("b0").Job("b", jobs.RoleWorker, 3).Created(t0.Add(5 * time.Second)).Obj(),
			want: true,
		},
		{
			name: "newer job second",
			p1:   testutil.MakePod().Name("b0").Job("b", jobs.RoleWorker, 3).Created(t0.Add(5 * time.Second)).Obj(),
			p2:   testutil.MakePod().Name("a0").Job("a", jobs.RoleWorker, 3).Created(t0).Obj(),
			want: false,
		},
		{
			name: "same job: by pod name",
			p1:   testutil.MakePod().Name("a-server").Job("a", jobs.RoleServer, 3).Created(t0).Obj(),
			p2:   testutil.MakePod().Name("a-worker").Job("a", jobs.RoleWorker, 3).Created(t0).Obj(),
			want: true,
		},
		{
			name: "same second: the job seen first",
			seen: []*v1.Pod{
				testutil.MakePod().Name("z0").Job("z", jobs.RoleWorker, 3).Created(t0).Obj(),
				testutil.MakePod().Name("a0").Job("a", jobs.RoleWorker, 3).Created(t0).Obj(),
			},
			p1:   testutil.MakePod().Name("z1").Job("z", jobs.RoleWorker, 3).Created(t0).Obj(),
			p2:   testutil.MakePod().Name("a1").Job("a", jobs.RoleWorker, 3).Created(t0).Obj(),
			want: true,
		},
		{
			name: "priority beats arrival",
			p1:   testutil.MakePod().Name("b0").Job("b", jobs.RoleWorker, 3).Created(t0.Add(time.Minute)).Priority(10).Obj(),
			p2:   testutil.MakePod().Name("a0").Job("a", jobs.RoleWorker, 3).Created(t0).Obj(),
			want: true,
		},
		{
			name: "non-Coach pods by creation time",
			p1:   testutil.MakePod().Name("web").Created(t0).Obj(),
			p2:   testutil.MakePod().Name("a0").Job("a", jobs.RoleWorker, 3).Created(t0.Add(time.Second)).Obj(),
			want: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := jobs.NewRegistry()
			for _, p := range tt.seen {
				r.Observe(p)
			}
			pl := jobfifo.NewWithRegistry(r)
			if got := pl.Less(qp(t, tt.p1), qp(t, tt.p2)); got != tt.want {
				t.Fatalf("Less = %v, want %v", got, tt.want)
			}
			if tt.want && pl.Less(qp(t, tt.p2), qp(t, tt.p1)) {
				t.Fatal("Less is not antisymmetric")
			}
		})
	}
}
