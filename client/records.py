"""Trials as flat records (one dict per trial) and as a pandas DataFrame."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.api.schemas import TRIAL_COLUMNS, TrialPublic, parameter_column

if TYPE_CHECKING:
    import pandas

__all__ = ["TRIAL_COLUMNS", "parameter_column", "to_dataframe", "trial_record"]

def trial_record(trial: TrialPublic) -> dict[str, Any]:
    """The trial's fields followed by its parameters, flattened into one dict."""
    fields = trial.model_dump(exclude={"parameters"})
    record = {"trial_id": fields.pop("id")} | fields
    record = {key: record[key] for key in TRIAL_COLUMNS}
    for name, value in trial.parameters.items():
        record[parameter_column(name)] = value
    return record


def to_dataframe(records: list[dict[str, Any]], parameter_names: list[str]) -> pandas.DataFrame:
    """Records as a DataFrame with a fixed column order (also when there are none)."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("Study.dataframe() needs pandas (pip install pandas); "
                          "Study.records() gives the same data as a list of dicts") from exc
    columns = TRIAL_COLUMNS + [parameter_column(n) for n in parameter_names]
    return pd.DataFrame.from_records(records, columns=columns)
