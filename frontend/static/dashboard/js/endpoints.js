// Every REST path the dashboard uses, in one place (relative to /api/v1/).
export const EP = {
  tasks: "tasks/",
  task: (id) => `tasks/${id}/`,
  taskCancel: (id) => `tasks/${id}/cancel/`,
  taskWeight: (id) => `tasks/${id}/change-weight/`,
  nodes: "nodes/",
  node: (id) => `nodes/${id}/`,
  nodeDrain: (id) => `nodes/${id}/drain/`,
  nodeClearQuarantine: (id) => `nodes/${id}/clear-quarantine/`,
  // Not in the API yet (reported as missing): the button is wired to this path and shows its error.
  nodeInjectFault: (id) => `nodes/${id}/inject-fault/`,
  devices: "devices/",
  failureEvents: "failure-events/",
  failureEvent: (id) => `failure-events/${id}/`,
  alerts: "alerts/",
  alertAcknowledge: (id) => `alerts/${id}/acknowledge/`,
  alertResolve: (id) => `alerts/${id}/resolve/`,
  plans: "plans/",
  transitions: "transitions/",
  clusterSeries: "metrics/cluster/",
  taskSeries: (id) => `metrics/tasks/${id}/`,
  audit: "audit/",
};
