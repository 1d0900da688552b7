package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/coach/scheduler_plugins/pkg/jobs"
)

const ns = "go-integration"

type job struct {
	name          string
	size, minimum int
}

func pod(name string, labels map[string]string, annotations map[string]string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations},
		Spec: v1.PodSpec{SchedulerName: jobs.SchedulerName, Containers: []v1.Container{{
			Name: "fn", Image: "coach/function:test",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}},
		}}},
	}
}

func jobPods(j job) []*v1.Pod {
	var out []*v1.Pod
	for i := 0; i < j.size; i++ {
		role := jobs.RoleWorker
		switch i {
		case 0:
			role = jobs.RoleScheduler
		case 1:
			role = jobs.RoleServer
		}
		out = append(out, pod(fmt.Sprintf("%s-%d", j.name, i),
			map[string]string{jobs.LabelJob: j.name, jobs.LabelRole: string(role)},
			map[string]string{jobs.AnnotationMinGroup: fmt.Sprint(j.minimum)}))
	}
	return out
}

// boundByJob counts bound pods per job label ("" for pods without one).
func boundByJob(ctx context.Context, t *testing.T) map[string]int {
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			out[p.Labels[jobs.LabelJob]]++
		}
	}
	return out
}

// settle waits until bindings stop changing for quiet, then returns them.
func settle(ctx context.Context, t *testing.T, quiet time.Duration) map[string]int {
	last, since := boundByJob(ctx, t), time.Now()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		now := boundByJob(ctx, t)
		if fmt.Sprint(now) != fmt.Sprint(last) {
			last, since = now, time.Now()
		} else if time.Since(since) >= quiet {
			return now
		}
	}
	t.Fatalf("bindings kept changing: %v", last)
	return nil
}

func TestGang(t *testing.T) {
	tests := []struct {
		name  string
		jobs  []job
		plain int // non-Coach pods sent to coach-gang
		want  map[string]int
	}{
		{
			name: "slides deadlock: two whole jobs, two with nothing",
			jobs: []job{{"d1", 4, 4}, {"d2", 4, 4}, {"d3", 4, 4}, {"d4", 4, 4}},
			want: map[string]int{"d1": 4, "d2": 4},
		},
		{
			name: "elastic extras fill the room once the minimum group is bound",
			jobs: []job{{"e1", 10, 3}},
			want: map[string]int{"e1": 8},
		},
		{
			name: "a job smaller than its minimum group never starts",
			jobs: []job{{"s1", 3, 4}},
			want: map[string]int{},
		},
		{
			name:  "non-Coach pods pass through",
			plain: 3,
			want:  map[string]int{"": 3},
		},
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var all [][]*v1.Pod
			for _, j := range tt.jobs {
				all = append(all, jobPods(j))
			}
			for i := 0; ; i++ { // interleaved: all jobs submitted at once
				created := false
				for _, ps := range all {
					if i < len(ps) {
						if _, err := client.CoreV1().Pods(ns).Create(ctx, ps[i], metav1.CreateOptions{}); err != nil {
							t.Fatal(err)
						}
						created = true
					}
				}
				if !created {
					break
				}
			}
			for i := 0; i < tt.plain; i++ {
				if _, err := client.CoreV1().Pods(ns).Create(ctx, pod(fmt.Sprintf("plain-%d", i), nil, nil),
					metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			got := settle(ctx, t, 4*time.Second)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("bound pods per job = %v, want %v", got, tt.want)
			}
			zero := int64(0)
			if err := client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
				metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true,
				func(ctx context.Context) (bool, error) {
					l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
					return err == nil && len(l.Items) == 0, nil
				}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A min-group annotation that is not a whole number holds the job back, says
// so in an event, and the job goes on as soon as the annotation is fixed: an
// annotation-only update is a plain Pod/Update, which the gang did not
// register, so the fix went unseen until the queue's 5-minute flush.
func TestAMinGroupFixedInPlaceLetsTheJobOn(t *testing.T) {
	ctx := context.Background()
	const fixName = "fix1"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pods := jobPods(job{fixName, 4, 4})
	for _, p := range pods {
		p.Annotations[jobs.AnnotationMinGroup] = "4 "
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := settle(ctx, t, 4*time.Second); got[fixName] != 0 {
		t.Fatalf("bound with an unreadable min-group: %v", got)
	}
	list, err := client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	said := false
	for _, e := range list.Items {
		said = said || e.Reason == "WaitingForGang" && strings.Contains(e.Note, `coach.io/min-group is "4 ", not a whole number`)
	}
	if !said {
		t.Fatalf("no WaitingForGang event names the annotation: %v", list.Items)
	}
	fixed := time.Now()
	patch := []byte(`{"metadata":{"annotations":{"` + jobs.AnnotationMinGroup + `":"4"}}}`)
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true,
		func(context.Context) (bool, error) { return boundByJob(ctx, t)[fixName] == 4, nil }); err != nil {
		t.Fatalf("not bound a minute after the fix: %v", boundByJob(ctx, t))
	}
	t.Logf("bound %.1f s after the fix", time.Since(fixed).Seconds())
	zero := int64(0)
	if err := client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}
