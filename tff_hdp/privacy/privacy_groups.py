"""Privacy groups: which clients chose which (epsilon, delta), or opted out.

FedHDP lets every client pick one of `l` privacy levels. A group with no
epsilon is the opt-out (non-private) group of FeO2. The assignment of clients to
groups is fixed for a run and seeded, so every algorithm compared in one table
sees the same private and opt-out clients; or it is the clients' own, read
from a file (`read_levels_file`, `assign_from_levels`), where the choice
follows the data. Either way who chose which level is public, as FedHDP
assumes.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from typing import Hashable, Mapping, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class PrivacyGroup:
  """One privacy level. `epsilon=None` means the group opted out of DP.

  `ratio` is r_j of SPEC.md §1 step 4: the weight multiplier of this group's
  mean when the groups' means are combined.
  """

  name: str
  epsilon: float | None = None
  delta: float | None = None
  ratio: float = 1.0

  def __post_init__(self):
    if self.epsilon is None:
      if self.delta is not None:
        raise ValueError(
            f'privacy group {self.name!r}: delta={self.delta} given without an '
            'epsilon; a non-private group has neither.')
    else:
      if not (math.isfinite(self.epsilon) and self.epsilon > 0):
        raise ValueError(
            f'privacy group {self.name!r}: epsilon must be a finite number > 0, '
            f'got {self.epsilon}.')
      if self.delta is None or not 0 < self.delta < 1:
        raise ValueError(
            f'privacy group {self.name!r}: delta must be in (0, 1), got '
            f'{self.delta}.')
    if not (math.isfinite(self.ratio) and self.ratio >= 0):
      raise ValueError(
          f'privacy group {self.name!r}: ratio r must be >= 0, got {self.ratio}.')

  @property
  def is_private(self) -> bool:
    return self.epsilon is not None


@dataclasses.dataclass(frozen=True)
class GroupAssignment:
  """Maps every client id to the index of its privacy group."""

  groups: tuple[PrivacyGroup, ...]
  client_groups: Mapping[Hashable, int]

  def __post_init__(self):
    if not self.groups:
      raise ValueError('at least one privacy group is needed.')
    names = [g.name for g in self.groups]
    if len(set(names)) != len(names):
      raise ValueError(f'privacy group names must be unique, got {names}.')
    for cid, g in self.client_groups.items():
      if not 0 <= g < len(self.groups):
        raise ValueError(
            f'client {cid!r} is assigned to group index {g}, but only '
            f'{len(self.groups)} groups exist.')

  @property
  def num_groups(self) -> int:
    return len(self.groups)

  def group_of(self, client_id: Hashable) -> int:
    try:
      return self.client_groups[client_id]
    except KeyError:
      raise KeyError(
          f'client {client_id!r} belongs to no privacy group.') from None

  def group_sizes(self) -> np.ndarray:
    """N_j: number of clients in each group."""
    counts = np.zeros(self.num_groups, dtype=np.int64)
    for g in self.client_groups.values():
      counts[g] += 1
    return counts

  def members(self, group_index: int) -> list[Hashable]:
    return [c for c, g in self.client_groups.items() if g == group_index]

  def one_hot(self, client_id: Hashable) -> np.ndarray:
    v = np.zeros(self.num_groups, dtype=np.float32)
    v[self.group_of(client_id)] = 1.0
    return v


def assign_by_fractions(client_ids: Sequence[Hashable],
                        groups: Sequence[PrivacyGroup],
                        fractions: Sequence[float],
                        seed: int) -> GroupAssignment:
  """Random assignment with the given fraction of clients in each group.

  Group sizes are rounded so that they add up to the population exactly; the
  draw depends only on `seed` and the order of `client_ids`.
  """
  groups = tuple(groups)
  fractions = np.asarray(fractions, dtype=np.float64)
  if len(fractions) != len(groups):
    raise ValueError(
        f'{len(fractions)} fractions given for {len(groups)} privacy groups.')
  if np.any(fractions < 0) or np.any(fractions > 1) or not np.isclose(
      fractions.sum(), 1.0):
    raise ValueError(
        f'group fractions must be in [0, 1] and sum to 1, got {list(fractions)}.')
  n = len(client_ids)
  if n == 0:
    raise ValueError('no clients to assign to privacy groups.')
  sizes = np.floor(fractions * n).astype(np.int64)
  # Largest-remainder rounding so that the sizes sum to n.
  remainder = fractions * n - sizes
  for i in np.argsort(-remainder, kind='stable')[:n - sizes.sum()]:
    sizes[i] += 1
  order = np.random.default_rng(seed).permutation(n)
  labels = np.repeat(np.arange(len(groups)), sizes)
  mapping = {client_ids[i]: int(labels[k]) for k, i in enumerate(order)}
  return GroupAssignment(groups, mapping)


def assign_opt_out(client_ids: Sequence[Hashable],
                   private_groups: Sequence[PrivacyGroup],
                   opt_out_fraction: float,
                   seed: int,
                   private_fractions: Sequence[float] | None = None,
                   opt_out_ratio: float = 1.0,
                   opt_out_pool: Sequence[Hashable] | None = None
                   ) -> GroupAssignment:
  """FeO2-style assignment: a fraction of clients opts out, the rest is private.

  The opt-out group is appended last and named 'opt_out'. `opt_out_pool`
  restricts which clients may opt out (the skewed non-IID MNIST setting draws
  them from the clients holding digit 7).
  """
  if not 0.0 <= opt_out_fraction <= 1.0:
    raise ValueError(
        f'opt-out fraction must be in [0, 1], got {opt_out_fraction}.')
  private_groups = tuple(private_groups)
  if private_fractions is None:
    private_fractions = [1.0 / len(private_groups)] * len(private_groups)
  if len(private_fractions) != len(private_groups):
    raise ValueError(
        f'{len(private_fractions)} fractions given for {len(private_groups)} '
        'private groups.')
  groups = private_groups + (PrivacyGroup('opt_out', ratio=opt_out_ratio),)
  n = len(client_ids)
  rng = np.random.default_rng(seed)
  n_out = int(round(opt_out_fraction * n))
  pool = list(client_ids if opt_out_pool is None else opt_out_pool)
  if n_out > len(pool):
    raise ValueError(
        f'{n_out} opt-out clients requested but only {len(pool)} are eligible.')
  opted = {pool[i] for i in rng.permutation(len(pool))[:n_out]}
  rest = [c for c in client_ids if c not in opted]
  private = assign_by_fractions(rest, private_groups, private_fractions,
                                seed=int(rng.integers(2**31))) if rest else None
  mapping = {c: len(private_groups) for c in opted}
  if private is not None:
    mapping.update(private.client_groups)
  return GroupAssignment(groups, mapping)


def assign_explicit(client_ids: Sequence[Hashable],
                    groups: Sequence[PrivacyGroup],
                    client_to_group: Mapping[Hashable, str | int]
                    ) -> GroupAssignment:
  """Assignment from an explicit map; every client must be covered."""
  groups = tuple(groups)
  index = {g.name: i for i, g in enumerate(groups)}
  missing = [c for c in client_ids if c not in client_to_group]
  if missing:
    raise ValueError(
        f'{len(missing)} clients are in no privacy group, e.g. {missing[:3]}.')
  mapping = {}
  for c in client_ids:
    g = client_to_group[c]
    if isinstance(g, str):
      if g not in index:
        raise ValueError(f'client {c!r}: unknown privacy group {g!r}; '
                         f'known groups: {sorted(index)}.')
      g = index[g]
    mapping[c] = int(g)
  return GroupAssignment(groups, mapping)


OPT_OUT = 'opt_out'


def read_levels_file(path: str) -> dict[str, str]:
  """{client id: level} from a JSON object or a CSV of `client_id,level`
  rows (a header row of those two words is allowed); a ValueError names the
  first duplicate or malformed row."""
  with open(path, newline='') as f:
    text = f.read()
  if path.endswith('.json'):
    try:
      value = json.loads(text, object_pairs_hook=_Pairs)
    except ValueError as e:
      raise ValueError(f'not a JSON file ({e}).') from None
    if not isinstance(value, _Pairs):
      raise ValueError('a JSON levels file is one object {client id: level}.')
    levels = {}
    for client, level in value:
      if str(client) in levels:
        raise ValueError(f'client {str(client)!r} is listed twice.')
      levels[str(client)] = str(level)
    if not levels:
      raise ValueError('it lists no client.')
    return levels
  levels = {}
  for line, row in enumerate(csv.reader(io.StringIO(text)), start=1):
    if not row or (line == 1 and [c.strip() for c in row] ==
                   ['client_id', 'level']):
      continue
    if len(row) != 2:
      raise ValueError(f'line {line} has {len(row)} fields, not client_id,'
                       'level.')
    client, level = (c.strip() for c in row)
    if client in levels:
      raise ValueError(f'client {client!r} is listed twice (line {line}).')
    levels[client] = level
  if not levels:
    raise ValueError('it lists no client.')
  return levels


class _Pairs(list):
  """A JSON object as its (key, value) pairs, duplicates kept (json.loads
  would keep the last of a duplicated key's values)."""


def parse_label_bands(text: str) -> list[tuple[frozenset[int], str]]:
  """'0-3:1,4-6:3.6,7-9:opt_out' as [(labels, level)]; a ValueError names
  a malformed band or a label in two."""
  bands, seen = [], {}
  for part in text.split(','):
    labels, colon, level = part.strip().partition(':')
    low, dash, high = labels.partition('-')
    try:
      first, last = int(low), int(high if dash else low)
    except ValueError:
      first = last = -1
    if not colon or not level or first < 0 or last < first:
      raise ValueError(f'{part.strip()!r} is not labels:level (e.g. 0-3:1 '
                       'or 9:opt_out).')
    band = frozenset(range(first, last + 1))
    for label in sorted(band):
      if label in seen:
        raise ValueError(f'label {label} is in two bands ({seen[label]!r} '
                         f'and {part.strip()!r}).')
      seen[label] = part.strip()
    bands.append((band, level.strip()))
  return bands


def levels_by_label(client_labels: Mapping[Hashable, np.ndarray],
                    bands: Sequence[tuple[frozenset[int], str]]
                    ) -> dict[str, str]:
  """{str(client id): level}: each client takes the level of the band that
  holds its most frequent training label (the choice follows the data). A
  ValueError names a label in no band, or a band's label no client holds."""
  level_of = {label: level for band, level in bands for label in band}
  levels, held = {}, set()
  for client, labels in client_labels.items():
    values, counts = np.unique(np.asarray(labels).astype(np.int64),
                               return_counts=True)
    label = int(values[np.argmax(counts)]) if len(values) else None
    if label not in level_of:
      raise ValueError(f'client {client}\'s most frequent label {label} is '
                       'in no band.')
    levels[str(client)] = level_of[label]
    held.update(int(v) for v in values)
  lacking = sorted(set(level_of) - held)
  if lacking:
    raise ValueError(f'no client holds label(s) '
                     f'{", ".join(map(str, lacking))}: the task lacks them.')
  return levels


def _group_of_level(groups: Sequence[PrivacyGroup], level: str,
                    chooser: str) -> int:
  """The index in `groups` (the private levels, then the opt-out group) of
  `level`, a group's name or a private level's epsilon; a ValueError names
  `chooser` and the known levels."""
  for j, g in enumerate(groups):
    if level == g.name:
      return j
  try:
    found = [j for j, g in enumerate(groups)
             if g.is_private and g.epsilon == float(level)]
  except ValueError:
    found = []
  if len(found) != 1:
    private = [g for g in groups if g.is_private]
    raise ValueError(
        f'{chooser}: unknown level {level!r}; the levels are '
        f'{", ".join(f"{g.epsilon:g}" for g in private)} (or their '
        f'names {", ".join(g.name for g in groups)}).')
  return found[0]


def band_labels(private_groups: Sequence[PrivacyGroup],
                bands: Sequence[tuple[frozenset[int], str]]
                ) -> dict[str, frozenset[int]]:
  """{group name: the labels of its bands}, for the groups that
  `levels_by_label` fills from `bands`, in `assign_from_levels`' order (the
  private levels, then the opt-out group). The bands are public, so a
  group's labels are too: the server may score the model on them."""
  groups = tuple(private_groups) + (PrivacyGroup(OPT_OUT),)
  labels = [frozenset()] * len(groups)
  for band, level in bands:
    j = _group_of_level(groups, level, f'band {sorted(band)}')
    labels[j] = labels[j] | band
  return {g.name: band for g, band in zip(groups, labels) if band}


def assign_from_levels(client_ids: Sequence[Hashable],
                       private_groups: Sequence[PrivacyGroup],
                       levels: Mapping[str, str]) -> GroupAssignment:
  """Each client's own level, as `levels` ({str(client id): level}) gives
  it: a private group's name or epsilon, or 'opt_out'; the opt-out group is
  appended last, as `assign_opt_out` does. Every client must be listed, no
  other, and every private group must hold one."""
  groups = tuple(private_groups) + (PrivacyGroup(OPT_OUT),)
  ids = {str(c): c for c in client_ids}
  missing = [c for c in ids if c not in levels]
  if missing:
    raise ValueError(f'{len(missing)} of the {len(ids)} clients have no '
                     f'level, e.g. {", ".join(missing[:3])}.')
  unknown = [c for c in levels if c not in ids]
  if unknown:
    raise ValueError(f'{len(unknown)} listed clients are not in the task, '
                     f'e.g. {", ".join(unknown[:3])}.')

  mapping = {ids[c]: _group_of_level(groups, level, f'client {c}')
             for c, level in levels.items()}
  sizes = np.bincount(list(mapping.values()), minlength=len(groups))
  empty = [g.name for g, n in zip(private_groups, sizes) if n == 0]
  if empty:
    raise ValueError(f'no client chose {", ".join(empty)}: a level without '
                     'clients is no level.')
  return GroupAssignment(groups, mapping)


def with_ratio(assignment: GroupAssignment, ratio: float) -> GroupAssignment:
  """`assignment` with every private group at combination ratio `ratio`
  and the non-private ones at 1 (FedHDP's r)."""
  return with_ratios(assignment, [ratio if g.is_private else 1.0
                                  for g in assignment.groups])


def with_ratios(assignment: GroupAssignment,
                ratios: Sequence[float]) -> GroupAssignment:
  """`assignment` with group j at combination ratio `ratios[j]`."""
  if len(ratios) != assignment.num_groups:
    raise ValueError(f'{len(ratios)} ratios for {assignment.num_groups} '
                     'privacy groups.')
  return GroupAssignment(tuple(
      dataclasses.replace(g, ratio=float(r))
      for g, r in zip(assignment.groups, ratios)), assignment.client_groups)


def with_level_ratios(assignment: GroupAssignment,
                      ratios: Sequence[float]) -> GroupAssignment:
  """`assignment` with its private groups, in order, at `ratios` and the
  non-private ones at 1."""
  private = [j for j, g in enumerate(assignment.groups) if g.is_private]
  if len(ratios) != len(private):
    raise ValueError(f'--level_ratios: {len(ratios)} ratios for '
                     f'{len(private)} private levels; give one per level.')
  per_group = [1.0] * assignment.num_groups
  for j, r in zip(private, ratios):
    per_group[j] = r
  return with_ratios(assignment, per_group)


def everyone_at_strictest(assignment: GroupAssignment) -> GroupAssignment:
  """Every client in one private group at the strictest target of
  `assignment` (DP-FedAvg, which serves the strictest level to all)."""
  private = [g for g in assignment.groups if g.is_private]
  if not private:
    raise ValueError('everyone at the strictest target needs at least one '
                     'private group.')
  strict = min(private, key=lambda g: (g.epsilon, g.delta))
  return GroupAssignment(
      (PrivacyGroup('all_private', strict.epsilon,
                    min(g.delta for g in private)),),
      {c: 0 for c in assignment.client_groups})


def everyone_non_private(assignment: GroupAssignment) -> GroupAssignment:
  """Every client in one group without noise (non-private FedAvg)."""
  return GroupAssignment((PrivacyGroup('all_non_private'),),
                         {c: 0 for c in assignment.client_groups})
