package jobs

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Only Coach pods of this scheduler are remembered when they go: every pod
// deleted in the cluster passes through the registry, and remembering them
// all (with a sweep of the record on each deletion) grew quadratically:
// 20,000 deletions held the write lock for 3.3 s.
func TestOnlyThisSchedulersPodsAreRememberedWhenGone(t *testing.T) {
	r := NewRegistry()
	for i := 0; i < 1000; i++ {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint(i), Namespace: "web", UID: types.UID(fmt.Sprint(i))}}
		r.Observe(pod)
		r.Delete(pod)
	}
	coach := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "default", UID: "w",
		Labels: map[string]string{LabelJob: "a", LabelRole: string(RoleWorker)}}, Spec: v1.PodSpec{SchedulerName: SchedulerName}}
	r.Observe(coach)
	r.Delete(coach)
	if len(r.gone) != 1 {
		t.Fatalf("%d pods remembered, want only the Coach pod", len(r.gone))
	}
}
