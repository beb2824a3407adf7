"""Reads of what a project offers: its quotas, regions, zones, machine and accelerator types
and image families. The only calls `bench doctor` and launch's cheap checks make to Compute.

Each read returns the resource as a plain dict (the REST JSON), or None when the API says
404; any other failure leaves as a bench error with the google.api_core exception as its
`__cause__` (doctor tells 401 from 403 by it).
"""

from __future__ import annotations

from typing import Any

from orchestrator.backends.gce.adaptor import message_to_dict
from orchestrator.backends.gce.compute import ComputeApi


def _as_dict(message: Any) -> dict[str, Any] | None:
    return None if message is None else message_to_dict(message)


class ProjectResources:
    def __init__(self, api: ComputeApi) -> None:
        self.api = api
        self.project = api.project

    def project_info(self) -> dict[str, Any] | None:
        return _as_dict(self.api.read_resource("ProjectsClient", "get", project=self.project))

    def region(self, region: str) -> dict[str, Any] | None:
        return _as_dict(
            self.api.read_resource("RegionsClient", "get", project=self.project, region=region)
        )

    def zone(self, zone: str) -> dict[str, Any] | None:
        return _as_dict(
            self.api.read_resource("ZonesClient", "get", project=self.project, zone=zone)
        )

    def machine_type(self, zone: str, name: str) -> dict[str, Any] | None:
        return _as_dict(
            self.api.read_resource(
                "MachineTypesClient", "get", project=self.project, zone=zone, machine_type=name
            )
        )

    def accelerator_type(self, zone: str, name: str) -> dict[str, Any] | None:
        return _as_dict(
            self.api.read_resource(
                "AcceleratorTypesClient",
                "get",
                project=self.project,
                zone=zone,
                accelerator_type=name,
            )
        )

    def image_from_family(self, image_project: str, family: str) -> dict[str, Any] | None:
        """The newest image of the family that is not deprecated, or None."""
        return _as_dict(
            self.api.read_resource(
                "ImagesClient", "get_from_family", project=image_project, family=family
            )
        )

    def images_in_family(self, image_project: str, family: str) -> list[dict[str, Any]]:
        """Every image of the family, deprecated ones included (to name a successor)."""
        pages = self.api.read_resource(
            "ImagesClient", "list", project=image_project, filter=f'family = "{family}"'
        )
        return [_as_dict(image) for image in (pages or [])]

    def image_state(self, image_project: str, family: str) -> tuple[dict | None, list[dict]]:
        """What readiness.image_check judges: the family's usable image, and (only when
        there is none, or it is deprecated) every image of the family."""
        resolved = self.image_from_family(image_project, family)
        if resolved is not None and not resolved.get("deprecated"):
            return resolved, []
        return resolved, self.images_in_family(image_project, family)
