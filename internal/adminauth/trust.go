package adminauth

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Trust is kube-apiserver's front-proxy configuration as its ConfigMap
// says now: the CA is rotated and the header names can change while the
// controller runs.
type Trust struct {
	state atomic.Pointer[trustState]
}

type trustState struct {
	rh  *requestHeader
	err error
}

var errAbsent = fmt.Errorf("the ConfigMap %s/%s does not exist: kube-apiserver publishes no front-proxy configuration", AuthenticationNamespace, AuthenticationConfigMap)

var errNotRead = fmt.Errorf("the ConfigMap %s/%s has not been read yet", AuthenticationNamespace, AuthenticationConfigMap)

func (t *Trust) current() (*requestHeader, error) {
	s := t.state.Load()
	if s == nil {
		return nil, errNotRead
	}
	return s.rh, s.err
}

// set applies the ConfigMap's content; nil is the ConfigMap deleted. A
// ConfigMap that does not parse trusts nobody until it is fixed.
func (t *Trust) set(cm *corev1.ConfigMap) {
	if cm == nil {
		t.state.Store(&trustState{err: errAbsent})
		return
	}
	rh, err := parseRequestHeader(cm)
	if err != nil {
		err = fmt.Errorf("ConfigMap %s/%s: %w", AuthenticationNamespace, AuthenticationConfigMap, err)
		logf.Log.WithName("admin-front").Error(err, "kube-apiserver's front proxy is not trusted")
	}
	t.state.Store(&trustState{rh: rh, err: err})
}

// Follow watches the ConfigMap (get, list and watch on that one name, what
// the extension-apiserver-authentication-reader Role grants) and applies
// each version until ctx ends. It returns once the first version is read.
func (t *Trust) Follow(ctx context.Context, cs kubernetes.Interface) error {
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", AuthenticationNamespace,
		fields.OneTermEqualSelector("metadata.name", AuthenticationConfigMap))
	configMap := func(obj any) *corev1.ConfigMap {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		cm, _ := obj.(*corev1.ConfigMap)
		return cm
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { t.set(configMap(obj)) },
			UpdateFunc: func(_, obj any) { t.set(configMap(obj)) },
			DeleteFunc: func(any) { t.set(nil) },
		},
	})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return errors.New("the front-proxy ConfigMap was not read before shutdown")
	}
	// Listed and absent: say so, unless a version arrived meanwhile.
	t.state.CompareAndSwap(nil, &trustState{err: errAbsent})
	return nil
}
