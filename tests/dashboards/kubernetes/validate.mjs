// Validate Kubernetes objects against their schemas, as the ecosystem's own packages hold them:
// kubernetes-models (Kubernetes' OpenAPI schemas) for core objects and
// @kubernetes-models/prometheus-operator (the Prometheus Operator's CRD schemas) for its kinds.
// Reads a JSON array of objects on stdin; prints one line per object ("ok KIND NAME" or
// "invalid KIND NAME: why") and exits 1 if any is invalid or of a kind it does not know.
import { Deployment } from "kubernetes-models/apps/v1";
import { ConfigMap } from "kubernetes-models/v1";
import { PodMonitor, PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const models = {
  "v1/ConfigMap": ConfigMap,
  "apps/v1/Deployment": Deployment,
  "monitoring.coreos.com/v1/PodMonitor": PodMonitor,
  "monitoring.coreos.com/v1/PrometheusRule": PrometheusRule,
  "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor,
};

let input = "";
for await (const chunk of process.stdin) input += chunk;
let failed = false;
for (const object of JSON.parse(input)) {
  const name = `${object.kind} ${object.metadata?.name}`;
  const Model = models[`${object.apiVersion}/${object.kind}`];
  if (!Model) {
    console.log(`invalid ${name}: no schema for ${object.apiVersion}`);
    failed = true;
    continue;
  }
  try {
    new Model(object).validate();
    console.log(`ok ${name}`);
  } catch (error) {
    console.log(`invalid ${name}: ${error.message}`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
