"""Public / private clients from their update norms, budgets unseen (PDP-FL).

A client's DP noise dominates the L2 norm of its update and grows as its
epsilon shrinks, so clusters of norms are clusters of privacy attitudes. A
Gaussian mixture (scikit-learn) is fitted to the log norms: noise norms differ
across budgets by factors, not offsets. The cluster with the smallest norms is
"public" (most relaxed budgets). The labels serve as PFA's grouping or as
FedHDP's privacy groups when budgets are hidden.

scikit-learn cannot run inside a TFF computation (TFF's C++ runtime has no
Python), so this runs on the norms outside one, e.g. in a driver.
"""

from __future__ import annotations

import numpy as np
from sklearn import mixture


def cluster_update_norms(norms, num_clusters: int = 2,
                         seed: int = 0) -> np.ndarray:
  """Cluster label per client, 0 for the smallest-norm cluster and upward."""
  norms = np.asarray(norms, float)
  if norms.ndim != 1 or np.any(~np.isfinite(norms)) or np.any(norms <= 0):
    raise ValueError('norms must be a vector of finite positive numbers.')
  if not 1 <= num_clusters <= len(norms):
    raise ValueError(f'need 1 <= clusters <= {len(norms)} (the clients), got '
                     f'{num_clusters}.')
  logs = np.log(norms)[:, None]
  gmm = mixture.GaussianMixture(num_clusters, n_init=5, random_state=seed)
  labels = gmm.fit_predict(logs)
  rank = np.argsort(np.argsort(gmm.means_[:, 0]))
  return rank[labels]


def public_clients(norms, num_clusters: int = 2, seed: int = 0) -> np.ndarray:
  """Boolean mask of the clients in the smallest-norm ("public") cluster."""
  return cluster_update_norms(norms, num_clusters, seed) == 0
