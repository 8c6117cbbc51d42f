"""How prfmap names its outputs: :class:`OutputKey`, the map suffix, pybids' view of the names.

Maps carry the model in the ``model`` entity (BEP016's draft, which pybids knows) and the
parameter in ``desc``, with BEP012's ``boldmap`` suffix, e.g.
``sub-01_task-bar_hemi-L_space-fsaverage5_model-gauss_desc-sigma_boldmap.func.gii``: every map has a
distinct name for plain pybids, so no map is handed another map's sidecar. The time series of
``--save-predictions`` are ``desc-<model>prediction_bold`` and ``desc-preproc_bold``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prfmap.io.naming import bids_name

MAP_SUFFIX = "boldmap"

PYBIDS_CONFIG: dict[str, Any] = {
    "name": "prfmap",
    "entities": [
        {"name": "param", "pattern": r"[_/\\]+desc-([a-zA-Z0-9]+)_boldmap"},
        {"name": "stat", "pattern": r"[_/\\]+stat-([a-zA-Z0-9]+)"},
    ],
}
"""pybids config of ``param`` (a map's ``desc``) and ``stat`` (group maps): pass
``config=["bids", "derivatives", PYBIDS_CONFIG]`` to ``BIDSLayout`` to query maps by parameter
(``layout.get(param="sigma")``); plain pybids reads each map's own sidecar without it."""


@dataclass(frozen=True)
class OutputKey:
    """The entities shared by every output file of one fit.

    Attributes
    ----------
    subject, session, task : str or None
        BIDS labels (no prefixes); session may be None.
    space : str
        Space label as fMRIPrep writes it in file names (``fsaverage5``, ``fsLR``, ``T1w``).
    den, res : str or None
        Density (surfaces, CIFTI) or resolution (volumes) labels, when the inputs had them.
    model : str
        ``gauss``, ``css``, ``dog`` or ``dn``.
    """

    subject: str
    session: str | None
    task: str
    space: str
    den: str | None
    res: str | None
    model: str

    def func_dir(self, output_dir: Path) -> Path:
        """Folder of this participant's (and session's) maps under ``output_dir``."""
        parts = [f"sub-{self.subject}"] + ([f"ses-{self.session}"] if self.session else [])
        return Path(output_dir).joinpath(*parts, "func")

    def stem(
        self,
        *,
        hemi: str | None = None,
        param: str | None = None,
        desc: str | None = None,
        stat: str | None = None,
    ) -> str:
        """File-name stem (no suffix, no extension) of one output.

        Parameters
        ----------
        hemi : {"L", "R"}, optional
            Hemisphere, for GIFTI outputs.
        param : str, optional
            Parameter label (``sigma``, ``r2``...) of a map: ``model-<model>_desc-<param>``. None
            for CIFTI maps holding every parameter (``model-<model>``).
        desc : str, optional
            Description label of a time series (``gaussprediction``, ``preproc``); the model,
            which BIDS has no entity for on ``bold`` files, goes into the label.
        stat : str, optional
            Statistic of a parameter map (``se``, ``ci95lower``, ``ci95upper``): the ``stat`` entity.
        """
        entities = {
            "sub": self.subject,
            "ses": self.session,
            "task": self.task,
            "hemi": hemi,
            "space": self.space,
            "res": self.res,
            "den": self.den,
        }
        if desc is None:
            entities.update(model=self.model, stat=stat, desc=param)
        else:
            entities["desc"] = desc
        return bids_name(entities)


def sidecar_of(path: Path) -> Path:
    """The JSON sidecar of a data file (``x_boldmap.func.gii`` → ``x_boldmap.json``)."""
    name = path.name
    for ext in (".func.gii", ".dscalar.nii", ".dtseries.nii", ".nii.gz", ".nii"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return path.with_name(name + ".json")
